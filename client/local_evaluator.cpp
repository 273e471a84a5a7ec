#include "client/local_evaluator.hpp"

#include <algorithm>
#include <cmath>

#include "client/feature_scaling.hpp"
#include "client/site_batch_norm.hpp"
#include "shared/model/federated_vector.hpp"
#include "shared/model/model.hpp"
#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"
#include "shared/util/threads.hpp"

namespace fedcore::client {

result<protocol::LocalEvaluation> evaluate_locally(const protocol::EvaluateRequest& request,
                                                   std::span<const float> params,
                                                   const data::TrainTest& loaded, int threads,
                                                   std::span<const float> site_values) {
  if (loaded.test.size() == 0) {
    return fail(errc::failed_precondition, "this site has no local test split");
  }
  // The same scale as training: a model trained on standardised features is evaluated on
  // standardised features (site scaling uses the training split's statistics).
  std::optional<data::TrainTest> scaled;
  if (request.scaling.mode != protocol::ScalingMode::none) {
    auto copy = scaled_copy(request.scaling, loaded);
    if (!copy) {
      return copy.error();
    }
    scaled = std::move(*copy);
  }
  const data::TrainTest& data = scaled ? *scaled : loaded;
  set_compute_threads(threads);
  auto spec = model::parse_model_spec(request.model_spec);
  if (spec) {
    spec = model::complete_spec(*spec, data.train.sample_shape, data.train.num_classes);
  }
  if (!spec) {
    return spec.error();
  }
  auto built = model::build_model(*spec);
  if (!built) {
    return built.error();
  }
  model::Model model = std::move(*built);
  const auto layout = model::federated_layout(model);
  if (layout.fingerprint_hex() != request.layout_fingerprint || params.size() != layout.total()) {
    return fail(errc::failed_precondition, "the server's model layout " +
                                               request.layout_fingerprint + " (" +
                                               std::to_string(params.size()) +
                                               " parameters) does not match the announced "
                                               "spec (" +
                                               layout.fingerprint_hex() + ", " +
                                               std::to_string(layout.total()) + " parameters)");
  }
  std::vector<float> with_site;  // FedBN: a copy of the payload with the site's values
  std::span<const float> values = params;
  if (request.site_batch_norm) {
    // FedBN: the site evaluates the shared layers with its own BatchNorm.
    const auto ranges = model::site_ranges(model);
    if (ranges.empty()) {
      return fail(errc::invalid_argument,
                  "'site_batch_norm' (FedBN) asks for the site's own BatchNorm, but the model "
                  "has no BatchNorm layer");
    }
    with_site = with_site_values(params, ranges, site_values);
    values = with_site;
  }
  model::load_federated(model, values);
  const auto report = model::evaluate(model, model::loss_for(*spec), data.test);
  // A diverged model still gets an answer the protocol can carry (loss at most 1e9).
  const double loss = std::isfinite(report.loss) ? std::min(report.loss, 1e9) : 1e9;
  return protocol::LocalEvaluation{loss, report.accuracy, report.samples};
}

}  // namespace fedcore::client
