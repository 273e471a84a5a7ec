#include "client/local_trainer.hpp"

#include <algorithm>
#include <cmath>

#include "shared/model/optimizer.hpp"
#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"
#include "shared/util/threads.hpp"

namespace fedcore::client {

LocalResult train_locally(const protocol::TrainRequest& request, std::span<const float> global,
                          const data::TrainTest& data, int threads) {
  LocalResult out;
  set_compute_threads(threads);
  auto spec = model::parse_model_spec(request.model_spec);
  if (spec) {
    spec = model::complete_spec(*spec, data.train.sample_shape, data.train.num_classes);
  }
  if (!spec) {
    out.failure = spec.error();
    return out;
  }
  auto built = model::build_model(*spec);
  if (!built) {
    out.failure = built.error();
    return out;
  }
  model::Model model = std::move(*built);
  if (model.layout().fingerprint_hex() != request.layout_fingerprint ||
      global.size() != model.param_count()) {
    out.failure =
        fail(errc::failed_precondition, "the server's model layout " + request.layout_fingerprint +
                                            " does not match the announced spec (" +
                                            model.layout().fingerprint_hex() + ")");
    return out;
  }
  std::copy(global.begin(), global.end(), model.params().begin());
  const auto loss = model::loss_for(*spec);
  if (request.evaluate && data.test.size() > 0) {
    const auto eval = model::evaluate(model, loss, data.test);
    out.report.evaluation = protocol::LocalEvaluation{eval.loss, eval.accuracy, eval.samples};
  }
  auto optimizer_config = model::optimizer_config_from_json(request.settings.optimizer);
  if (!optimizer_config) {
    out.failure = optimizer_config.error();
    return out;
  }
  auto optimizer = model::make_optimizer(*optimizer_config, model.param_count());
  model::TrainConfig config;
  config.epochs = request.settings.epochs;
  config.batch_size = request.settings.batch_size;
  config.seed = request.settings.seed;
  config.proximal_mu = request.settings.proximal_mu;
  const auto report = model::train(model, loss, *optimizer, data.train, config,
                                   config.proximal_mu > 0 ? global : std::span<const float>());
  out.params.assign(model.params().begin(), model.params().end());
  out.report.run_id = request.run_id;
  out.report.round = request.round;
  out.report.nonce = request.nonce;
  out.report.layout_fingerprint = request.layout_fingerprint;
  out.report.samples = data.train.size();
  out.report.loss = std::isfinite(report.loss) ? report.loss : 1e9;
  out.report.accuracy = report.accuracy;
  out.report.train_seconds = report.seconds;
  return out;
}

}  // namespace fedcore::client
