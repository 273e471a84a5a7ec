#include "sim/baseline.hpp"

#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include "server/federation/run_config.hpp"
#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"
#include "shared/util/threads.hpp"

namespace fedcore::sim {

double passes_per_round(const SimOptions& o) {
  federation::RunConfig sampling;
  sampling.clients_per_round = static_cast<std::int64_t>(o.clients_per_round);
  sampling.fraction = o.fraction;
  const auto sampled = federation::clients_to_sample(sampling, o.clients);
  return double(o.local_epochs) * double(sampled) / double(o.clients);
}

int baseline_epochs(const SimOptions& o) {
  if (o.baseline_epochs > 0) {
    return o.baseline_epochs;
  }
  return std::max(1, static_cast<int>(std::ceil(double(o.rounds) * passes_per_round(o) - 1e-9)));
}

result<BaselineResult> run_baseline(const SimOptions& o, const data::TrainTest& data,
                                    const std::function<void(const EpochRow&)>& on_epoch) {
  auto document = model_spec_json(o);
  if (!document) {
    return document.error();
  }
  auto spec = model::parse_model_spec(*document);
  if (spec) {
    spec = model::complete_spec(*spec, data.train.sample_shape, data.train.num_classes);
  }
  if (!spec) {
    return spec.error();
  }
  auto optimizer_config = model::optimizer_config_from_json(optimizer_json(o));
  if (!optimizer_config) {
    return optimizer_config.error();
  }
  auto model = model::build_model(*spec);
  if (!model) {
    return model.error();
  }
  // The same initial model as the federated run's (the server initialises with the seed).
  model->initialize(o.seed);
  const auto loss = model::loss_for(*spec);
  auto optimizer = model::make_optimizer(*optimizer_config, model->param_count());

  BaselineResult out;
  out.epochs = baseline_epochs(o);
  set_compute_threads(o.baseline_threads);
  out.threads = compute_threads();
  const auto started = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < out.epochs; ++epoch) {
    model::TrainConfig config{.epochs = 1,
                              .batch_size = o.batch,
                              .seed = o.seed + static_cast<std::uint64_t>(epoch),
                              .proximal_mu = 0.0f};
    const auto report = model::train(*model, loss, *optimizer, data.train, config);
    const auto test = model::evaluate(*model, loss, data.test);
    EpochRow row{epoch + 1, test.accuracy, test.loss, report.loss, report.seconds};
    out.curve.push_back(row);
    if (on_epoch) {
      on_epoch(row);
    }
  }
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  set_compute_threads(1);
  return out;
}

}  // namespace fedcore::sim
