#include "client/local_trainer.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "client/dp_noise.hpp"
#include "client/feature_scaling.hpp"
#include "client/site_batch_norm.hpp"
#include "shared/model/federated_vector.hpp"
#include "shared/model/model.hpp"
#include "shared/model/optimizer.hpp"
#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"
#include "shared/util/threads.hpp"

namespace fedcore::client {

namespace {

// Refuses DP terms that would train without a bound or without noise.
std::optional<error> check_record_dp(const protocol::PrivacyTerms& terms) {
  if (!(terms.clip_norm > 0) || !std::isfinite(terms.clip_norm) || !(terms.noise_multiplier > 0) ||
      !std::isfinite(terms.noise_multiplier)) {
    return fail(errc::invalid_argument,
                "record-level DP needs a positive clip_norm and noise_multiplier (got " +
                    std::to_string(terms.clip_norm) + " and " +
                    std::to_string(terms.noise_multiplier) + ")");
  }
  return std::nullopt;
}

}  // namespace

LocalResult train_locally(const protocol::TrainRequest& request, std::span<const float> global,
                          const data::TrainTest& loaded, int threads,
                          const std::optional<model::DpRandom>& dp_random,
                          std::span<const float> correction, std::span<const float> site_values) {
  LocalResult out;
  const bool record_dp = request.privacy.dp == protocol::DpMode::record;
  if (!correction.empty() && (record_dp || correction.size() != global.size())) {
    out.failure =
        fail(errc::invalid_argument,
             record_dp ? std::string("SCAFFOLD's correction does not apply to "
                                     "record-level DP-SGD")
                       : "SCAFFOLD's control variate has " + std::to_string(correction.size()) +
                             " values; the model " + std::to_string(global.size()));
    return out;
  }
  if (record_dp) {
    if (auto refused = check_record_dp(request.privacy)) {
      out.failure = std::move(refused);
      return out;
    }
  }
  // Scaled on a copy: the daemon keeps the data as loaded, and a later request may bring
  // another scale (a restarted run on another server).
  std::optional<data::TrainTest> scaled;
  if (request.scaling.mode != protocol::ScalingMode::none) {
    auto copy = scaled_copy(request.scaling, loaded);
    if (!copy) {
      out.failure = copy.error();
      return out;
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
    out.failure = spec.error();
    return out;
  }
  auto built = model::build_model(*spec);
  if (!built) {
    out.failure = built.error();
    return out;
  }
  model::Model model = std::move(*built);
  const auto layout = model::federated_layout(model);
  if (layout.fingerprint_hex() != request.layout_fingerprint || global.size() != layout.total()) {
    out.failure = fail(errc::failed_precondition,
                       "the server's model layout " + request.layout_fingerprint +
                           " does not match the announced spec (" + layout.fingerprint_hex() + ")");
    return out;
  }
  if (record_dp && !model.state().empty()) {
    out.failure = fail(errc::invalid_argument,
                       "record-level DP (DP-SGD) cannot bound a record's influence through "
                       "BatchNorm, which mixes the records of a batch");
    return out;
  }
  // FedBN: the site's own BatchNorm in place of the global model's (site_batch_norm.hpp).
  std::vector<model::ValueRange> site_ranges;
  // The values training starts from: the received ones, or (FedBN) a copy with the site's.
  std::vector<float> with_site;
  std::span<const float> start = global;
  if (request.site_batch_norm) {
    site_ranges = model::site_ranges(model);
    if (site_ranges.empty()) {
      out.failure = fail(errc::invalid_argument,
                         "'site_batch_norm' (FedBN) asks for the site's own BatchNorm, but the "
                         "model has no BatchNorm layer");
      return out;
    }
    with_site = with_site_values(global, site_ranges, site_values);
    start = with_site;
  }
  model::load_federated(model, start);
  const auto loss = model::loss_for(*spec);
  if (request.evaluate && data.test.size() > 0 && !record_dp) {
    const auto eval = model::evaluate(model, loss, data.test);
    out.report.evaluation = protocol::LocalEvaluation{eval.loss, eval.accuracy, eval.samples};
  }
  auto optimizer_config = model::optimizer_config_from_json(request.settings.optimizer);
  if (!optimizer_config) {
    out.failure = optimizer_config.error();
    return out;
  }
  auto optimizer = model::make_optimizer(*optimizer_config, model.param_count());
  // FedProx pulls towards the model training started from (with FedBN, the site's BatchNorm).
  const auto anchor = request.settings.proximal_mu > 0 ? start.first(model.param_count())
                                                       : std::span<const float>();
  model::TrainReport report;
  if (record_dp) {
    const model::DpSgdConfig config{.epochs = request.settings.epochs,
                                    .expected_batch = request.settings.batch_size,
                                    .clip_norm = request.privacy.clip_norm,
                                    .noise_multiplier = request.privacy.noise_multiplier,
                                    .proximal_mu = request.settings.proximal_mu};
    CryptoDpRandom crypto;
    auto trained = model::train_dp_sgd(model, loss, *optimizer, data.train, config,
                                       dp_random ? *dp_random : crypto.random(), anchor);
    if (!trained) {
      out.failure = trained.error();
      return out;
    }
    out.record_dp = RecordDpSteps{trained->sampling_rate, trained->noise_multiplier,
                                  static_cast<std::uint64_t>(trained->steps)};
    report.seconds = trained->seconds;  // loss and accuracy stay 0: see the header
  } else {
    model::TrainConfig config;
    config.epochs = request.settings.epochs;
    config.batch_size = request.settings.batch_size;
    config.seed = request.settings.seed;
    config.proximal_mu = request.settings.proximal_mu;
    config.gradient_correction = correction;
    report = model::train(model, loss, *optimizer, data.train, config, anchor);
    out.steps = report.steps;
  }
  out.params = model::federated_values(model);
  if (!site_ranges.empty()) {
    // What training made of the site's BatchNorm stays here; the global model's values go
    // back in its place, so the update says nothing about it.
    out.site_values = take_site_values(global, out.params, site_ranges);
  }
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
