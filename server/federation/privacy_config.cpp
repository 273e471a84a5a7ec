#include "server/federation/privacy_config.hpp"

#include <cmath>

#include "server/federation/server_optimizer.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::federation {
namespace {

using nlohmann::json;

result<SecureAggregationConfig> parse_secure(const json& j, const JsonPath& at) {
  StrictObject o(j, at,
                 {"degree", "threshold", "clip_range", "quant_range", "stage_timeout_s",
                  "bind_keys", "per_client_evaluation"});
  SecureAggregationConfig c;
  c.settings = secagg::SecAggSettings{
      .degree = 0, .threshold = 0, .clip_range = 8.0, .quant_range = 1u << 22};
  o.integer("degree", c.settings.degree, {0, 1024});
  o.integer("threshold", c.settings.threshold, {0, 1024});
  o.number("clip_range", c.settings.clip_range, {1e-6, 1e6});
  o.integer("quant_range", c.settings.quant_range, {2, 4294967295});
  o.number("stage_timeout_s", c.stage_timeout_s, {0.1, 86400});
  o.boolean("bind_keys", c.bind_keys);
  o.boolean("per_client_evaluation", c.per_client_evaluation);
  if (auto done = o.status(); !done) {
    return done.error();
  }
  return c;
}

result<DpConfig> parse_dp(const json& j, const JsonPath& at) {
  StrictObject o(j, at,
                 {"mode", "epsilon", "delta", "clip_norm", "noise_multiplier", "adaptive_clip"});
  DpConfig c;
  // No default mode: {"dp": {"epsilon": 8, ...}} without one would train without DP.
  if (o.ok() && !o.has("mode")) {
    o.reject("mode", "is required: none, record, client_central or client_distributed");
  }
  std::string mode;
  o.choice("mode", mode, {"none", "record", "client_central", "client_distributed"});
  if (!o.ok()) {
    return o.status().error();
  }
  c.mode = protocol::dp_mode_from_name(mode).value_or(protocol::DpMode::none);
  if (c.mode == protocol::DpMode::none) {
    for (const char* key : {"epsilon", "delta", "clip_norm", "noise_multiplier", "adaptive_clip"}) {
      if (o.has(key)) {
        o.reject(key, "applies only when '" + o.at("mode").path() + "' is not \"none\"");
      }
    }
  }
  o.number("epsilon", c.epsilon, {0, 1e4});
  o.number("delta", c.delta, {0, 0.1});
  o.number("clip_norm", c.clip_norm, {0, 1e6});
  o.number("noise_multiplier", c.noise_multiplier, {0, 1e4});
  if (o.ok() && o.has("adaptive_clip")) {
    StrictObject a(*o.find("adaptive_clip"), o.at("adaptive_clip"),
                   {"target_quantile", "learning_rate", "count_stddev"});
    AdaptiveClipConfig adaptive{0.5, 0.2, 1};
    a.number("target_quantile", adaptive.target_quantile, {0.01, 0.99});
    a.number("learning_rate", adaptive.learning_rate, {1e-6, 10});
    a.number("count_stddev", adaptive.count_stddev, {1e-6, 1e6});
    if (o.take(a.status())) {
      c.adaptive = adaptive;
    }
  }
  if (o.ok() && c.mode != protocol::DpMode::none) {
    const char* budget = "a DP run states its budget: epsilon > 0 and 0 < delta <= 0.1";
    if (!(c.epsilon > 0)) {
      o.reject("epsilon", std::string("must be positive (") + budget + ")");
    } else if (!(c.delta > 0)) {
      o.reject("delta", std::string("must be positive (") + budget + ")");
    } else if (!(c.clip_norm > 0)) {
      o.reject("clip_norm", "must be positive");
    }
  }
  if (auto done = o.status(); !done) {
    return done.error();
  }
  return c;
}

}  // namespace

result<PrivacyConfig> parse_privacy_config(const json& j) {
  return parse_privacy_config(j, JsonPath("run config", "privacy"));
}

result<PrivacyConfig> parse_privacy_config(const json& j, const JsonPath& at) {
  StrictObject o(j, at, {"secure_aggregation", "dp"});
  PrivacyConfig c;
  if (o.ok() && o.has("secure_aggregation")) {
    auto secure = parse_secure(*o.find("secure_aggregation"), o.at("secure_aggregation"));
    if (o.take(secure)) {
      c.secure_aggregation = *secure;
    }
  }
  if (o.ok() && o.has("dp")) {
    auto dp = parse_dp(*o.find("dp"), o.at("dp"));
    if (o.take(dp)) {
      c.dp = *dp;
    }
  }
  if (auto done = o.status(); !done) {
    return done.error();
  }
  return c;
}

json to_json(const PrivacyConfig& c) {
  json j = json::object();
  if (c.secure_aggregation) {
    const auto& s = *c.secure_aggregation;
    j["secure_aggregation"] = {{"degree", s.settings.degree},
                               {"threshold", s.settings.threshold},
                               {"clip_range", s.settings.clip_range},
                               {"quant_range", s.settings.quant_range},
                               {"stage_timeout_s", s.stage_timeout_s},
                               {"bind_keys", s.bind_keys},
                               {"per_client_evaluation", s.per_client_evaluation}};
  }
  if (c.dp.mode != protocol::DpMode::none) {
    j["dp"] = {{"mode", protocol::dp_mode_name(c.dp.mode)},
               {"epsilon", c.dp.epsilon},
               {"delta", c.dp.delta},
               {"clip_norm", c.dp.clip_norm},
               {"noise_multiplier", c.dp.noise_multiplier}};
    if (c.dp.adaptive) {
      j["dp"]["adaptive_clip"] = {{"target_quantile", c.dp.adaptive->target_quantile},
                                  {"learning_rate", c.dp.adaptive->learning_rate},
                                  {"count_stddev", c.dp.adaptive->count_stddev}};
    }
  }
  return j;
}

result<void> check_compatibility(const PrivacyConfig& privacy, const RunFeatures& run) {
  auto refuse = [](const std::string& why) {
    return fail(errc::invalid_argument, "run config: incompatible: " + why);
  };
  const bool secure = privacy.secure_aggregation.has_value();
  if (secure) {
    // A server optimizer steps on the mean, which is what the unmasked sum gives.
    if (run.strategy != "fedavg" && run.strategy != "fedprox" &&
        !server_optimizer_kind(run.strategy)) {
      return refuse("secure aggregation gives the server only the sum of the updates; strategy '" +
                    run.strategy + "' needs each update on its own");
    }
    if (run.max_update_norm > 0) {
      return refuse(
          "secure aggregation hides each update, so the server cannot check its norm "
          "(max_update_norm); clip at the clients with privacy.secure_aggregation.clip_range");
    }
    if (run.compression != "none") {
      return refuse(
          "compressed updates (compression.up) are not masked: secure aggregation quantizes "
          "and masks each update itself (privacy.secure_aggregation.quant_range)");
    }
    if (run.min_clients < 3) {
      return refuse(
          "secure aggregation needs min_clients >= 3 (with two, each learns the "
          "other's update from the sum)");
    }
  }
  if (privacy.dp.adaptive && privacy.dp.mode != protocol::DpMode::client_central &&
      privacy.dp.mode != protocol::DpMode::client_distributed) {
    return refuse(
        "adaptive clipping moves the clip of client-level DP-FedAvg: dp.mode client_central "
        "or client_distributed");
  }
  if (privacy.dp.mode != protocol::DpMode::none && run.federated_evaluation) {
    return refuse(
        "per-client evaluation metrics are computed on the sites' data and are not "
        "covered by the privacy accountant; set federated_evaluation to false (the "
        "server's own test set still evaluates every round)");
  }
  if (privacy.dp.mode == protocol::DpMode::client_distributed && !secure) {
    return refuse(
        "distributed DP adds each client's share of the noise and relies on secure "
        "aggregation to hide the under-noised individual updates; add "
        "privacy.secure_aggregation or use dp.mode client_central");
  }
  if ((privacy.dp.mode == protocol::DpMode::client_central ||
       privacy.dp.mode == protocol::DpMode::client_distributed) &&
      run.strategy != "fedavg" && run.strategy != "fedprox") {
    return refuse(
        "client-level DP-FedAvg is the run's aggregation (a clipped, noised mean); "
        "strategy '" +
        run.strategy + "' cannot run with it");
  }
  return {};
}

}  // namespace fedcore::federation
