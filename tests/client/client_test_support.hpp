// Helpers for the client tests: a tiny data set, the model a fake server announces, a
// connected pair of local sockets, and an io_context runner that waits on a condition.
#pragma once

#include <chrono>
#include <functional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/connect_pair.hpp>

#include "shared/data/dataset.hpp"
#include "shared/model/model.hpp"
#include "shared/model/spec.hpp"
#include "shared/net/frame_channel.hpp"
#include "shared/protocol/messages.hpp"

namespace fedcore::client::testing {

// 24 samples of 4 features, two classes separated by the sign of the first feature.
inline data::TrainTest tiny_data() {
  data::Dataset d;
  d.sample_shape = {4};
  d.num_classes = 2;
  d.features.resize(4, 24);
  for (int i = 0; i < 24; ++i) {
    const float sign = i % 2 == 0 ? 1.0f : -1.0f;
    d.features.col(i) << sign * (1.0f + 0.1f * float(i)), 0.5f, -0.25f * sign, float(i % 3);
    d.labels.push_back(i % 2 == 0 ? 1 : 0);
  }
  data::TrainTest out;
  out.test = d.subset(std::vector<std::size_t>{0, 1, 2, 3});
  out.train = std::move(d);
  return out;
}

// What a server would announce for tiny_data(): a logistic regression.
struct Announced {
  nlohmann::json spec = {{"type", "logreg"}};
  std::string fingerprint;
  std::vector<float> global;
};

inline Announced announced_logreg() {
  Announced a;
  auto spec = model::complete_spec(*model::parse_model_spec(a.spec), {4}, 2);
  auto built = model::build_model(*spec);
  built->initialize(7);
  a.fingerprint = built->layout().fingerprint_hex();
  a.global.assign(built->params().begin(), built->params().end());
  return a;
}

inline protocol::TrainRequest train_request(const Announced& a, std::int64_t round) {
  protocol::TrainRequest r;
  r.run_id = 3;
  r.round = round;
  r.nonce = std::string(31, '0') + std::to_string(round % 10);
  r.model_spec = a.spec;
  r.layout_fingerprint = a.fingerprint;
  r.settings.epochs = 1;
  r.settings.batch_size = 8;
  r.settings.seed = 5;
  return r;
}

inline std::pair<net::LocalStream, net::LocalStream> socket_pair(boost::asio::io_context& io) {
  net::LocalStream a(io), b(io);
  boost::asio::local::connect_pair(a, b);
  return {std::move(a), std::move(b)};
}

// Runs handlers until `done` holds; false if it did not within `limit` (wall time, a
// safety net only: the tests drive time through a ManualSleeper).
inline bool run_until(boost::asio::io_context& io, const std::function<bool()>& done,
                      std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  io.restart();
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) {
      return false;
    }
    io.run_one_for(std::chrono::milliseconds(20));
    io.restart();
  }
  return true;
}

}  // namespace fedcore::client::testing
