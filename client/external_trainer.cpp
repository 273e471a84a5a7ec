#include "client/external_trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include <spdlog/spdlog.h>

#include "shared/model/spec.hpp"

namespace fedcore::client {
namespace {

// The request's model must be external, its layout the one the server fingerprinted and,
// when the site declared its own, that one: a site must never train or send a buffer whose
// tensors mean something else than the server thinks.
result<model::ParamLayout> checked_layout(ExternalTrainer& site, const nlohmann::json& spec_json,
                                          const std::string& fingerprint, std::size_t payload) {
  auto spec = model::parse_model_spec(spec_json);
  if (!spec) {
    return spec.error();
  }
  if (spec->type != model::ModelType::external) {
    return fail(errc::failed_precondition,
                "this site trains its own (external) model; the run asks for a built-in one, "
                "which fedcore-client trains");
  }
  const auto& layout = spec->layout;
  if (layout.fingerprint_hex() != fingerprint || layout.total() != payload) {
    return fail(errc::failed_precondition, "the server's model layout " + fingerprint +
                                               " does not match the announced spec (" +
                                               layout.fingerprint_hex() + ")");
  }
  if (auto own = site.layout(); own && own->fingerprint() != layout.fingerprint()) {
    std::string differs = "the tensor counts (" + std::to_string(own->entries().size()) + " vs " +
                          std::to_string(layout.entries().size()) + ")";
    for (std::size_t i = 0; i < std::min(own->entries().size(), layout.entries().size()); ++i) {
      const auto& a = own->entries()[i];
      const auto& b = layout.entries()[i];
      if (a.name != b.name || a.shape != b.shape) {
        differs = "tensor " + std::to_string(i) + ": the site has '" + a.name + "' " +
                  model::shape_to_string(a.shape) + ", the run '" + b.name + "' " +
                  model::shape_to_string(b.shape);
        break;
      }
    }
    return fail(errc::failed_precondition, "the run's model layout " + layout.fingerprint_hex() +
                                               " is not this site's model (" +
                                               own->fingerprint_hex() + "): " + differs);
  }
  return layout;
}

}  // namespace

LocalResult train_externally(ExternalTrainer& site, const protocol::TrainRequest& request,
                             std::span<const float> global) {
  LocalResult out;
  if (request.privacy.dp == protocol::DpMode::record) {
    out.failure = fail(errc::failed_precondition,
                       "record-level DP trains with Fedcore's DP-SGD; a site's own training "
                       "code cannot give its guarantee");
    return out;
  }
  if (request.scaling.mode != protocol::ScalingMode::none) {
    out.failure = fail(errc::failed_precondition,
                       "feature scaling is applied by Fedcore's own trainer; scale the data in "
                       "the site's code and run without 'feature_scaling'");
    return out;
  }
  auto layout = checked_layout(site, request.model_spec, request.layout_fingerprint, global.size());
  if (!layout) {
    out.failure = layout.error();
    return out;
  }
  if (request.evaluate) {
    auto evaluation = site.evaluate(request.run_id, request.round, *layout, global);
    if (evaluation) {
      out.report.evaluation = *evaluation;
    } else {
      spdlog::warn("round {}: evaluating the received model failed: {}", request.round,
                   evaluation.error().message);
    }
  }
  const auto started = std::chrono::steady_clock::now();
  auto fitted = site.fit(request, *layout, global);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
  if (!fitted) {
    out.failure = fitted.error();
    return out;
  }
  if (fitted->samples == 0) {
    out.failure = fail(errc::invalid_argument,
                       "fit returned 0 examples; an update's weight must be at least 1");
    return out;
  }
  if (fitted->params.size() != layout->total()) {
    out.failure = fail(errc::invalid_argument,
                       "fit returned " + std::to_string(fitted->params.size()) +
                           " parameters; the model has " + std::to_string(layout->total()));
    return out;
  }
  for (std::size_t i = 0; i < fitted->params.size(); ++i) {
    if (!std::isfinite(fitted->params[i])) {
      out.failure =
          fail(errc::invalid_argument, "fit returned a non-finite parameter at flat index " +
                                           std::to_string(i) + "; nothing was sent");
      return out;
    }
  }
  out.params = std::move(fitted->params);
  out.report.run_id = request.run_id;
  out.report.round = request.round;
  out.report.nonce = request.nonce;
  out.report.layout_fingerprint = request.layout_fingerprint;
  out.report.samples = fitted->samples;
  out.report.loss = std::isfinite(fitted->loss) ? fitted->loss : 1e9;
  out.report.accuracy =
      std::isfinite(fitted->accuracy) ? std::clamp(fitted->accuracy, 0.0, 1.0) : 0;
  out.report.train_seconds = took.count();
  return out;
}

result<protocol::LocalEvaluation> evaluate_externally(ExternalTrainer& site,
                                                      const protocol::EvaluateRequest& request,
                                                      std::span<const float> params) {
  auto layout = checked_layout(site, request.model_spec, request.layout_fingerprint, params.size());
  if (!layout) {
    return layout.error();
  }
  return site.evaluate(request.run_id, request.round, *layout, params);
}

}  // namespace fedcore::client
