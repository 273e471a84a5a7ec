// FedBN at the site (Li et al. 2021; run option 'batch_norm' "local", docs/config.md): the
// site's own BatchNorm weights, biases and running statistics, kept across rounds.
//
// A TRAIN or EVALUATE with "site_batch_norm" brings the global model with the server's
// values in the BatchNorm entries (model/federated_vector.hpp site_ranges). The site puts
// its own values there before it evaluates or trains (the global model's in its first
// round), keeps what training made of them, and sends the global model's values back in
// their place, so they never leave the site (client/local_trainer.hpp).
//
// The values of one run are kept, the run the site last trained for (another run starts
// from the global model's): the memory is the BatchNorm part of one model. They live in the
// daemon, not the session, so a reconnect between rounds keeps them. With a file
// (persist_to; the client config's "site_state" directory) every keep also writes them there,
// atomically, so a restarted daemon continues with them; without one, a restarted daemon
// starts again from the global model's values, like a site joining late. Thread safety: all
// methods may be called from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/model/federated_vector.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

// What the site trains or evaluates from: `global` with `site` (packed in `ranges`' order)
// in `ranges`; with `site` empty or of another size (the site's first round), `global`.
std::vector<float> with_site_values(std::span<const float> global,
                                    std::span<const model::ValueRange> ranges,
                                    std::span<const float> site);
// Takes the site's values out of `trained` (returned, packed) and puts `global`'s back in
// their place, so the update says nothing about them.
// REQUIRES: trained.size() == global.size(); every range inside both.
std::vector<float> take_site_values(std::span<const float> global, std::span<float> trained,
                                    std::span<const model::ValueRange> ranges);
// The ranges an external model's spec marks (model::external_site_ranges). Errors:
// invalid_argument when the spec does not parse or marks no tensor "normalization".
result<std::vector<model::ValueRange>> external_site_ranges(const nlohmann::json& spec);

class SiteBatchNorm {
 public:
  // The site's values for `run_id`, packed in site_ranges order; empty when it has none.
  std::vector<float> of(std::int64_t run_id);
  // Keeps `values` as the site's for `run_id`, replacing another run's, and writes them to
  // the file when there is one. Errors: the file's (io_error); the values are kept in memory
  // all the same.
  result<void> keep(std::int64_t run_id, std::vector<float> values);
  // From now on keeps the values in `path` (a Fedcore parameter file, docs/formats.md) too,
  // and continues with the ones it holds. A missing file is an empty start. Errors: a file
  // that is not one this class wrote (invalid_argument, data_loss, ... naming the path: it
  // is not overwritten; move it away to start afresh).
  result<void> persist_to(std::string path);

 private:
  std::mutex mutex_;
  std::string path_;           // guarded by mutex_; empty: memory only
  std::int64_t run_id_ = 0;    // guarded by mutex_
  std::vector<float> values_;  // guarded by mutex_
};

}  // namespace fedcore::client
