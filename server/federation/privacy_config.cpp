#include "server/federation/privacy_config.hpp"

#include <cmath>

namespace fedcore::federation {
namespace {

using nlohmann::json;

error bad(const std::string& message) {
  return fail(errc::invalid_argument, "run config: privacy." + message);
}

// A number in [low, high] under `key`, or the fallback when absent.
result<double> number(const json& j, const char* key, double low, double high, double fallback) {
  if (!j.contains(key)) {
    return fallback;
  }
  const auto& v = j[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < low ||
      v.get<double>() > high) {
    return fail(errc::invalid_argument, std::string(key) + " must be a number in [" +
                                            std::to_string(low) + ", " + std::to_string(high) +
                                            "], got " + v.dump());
  }
  return v.get<double>();
}

bool only_known(const json& j, std::initializer_list<const char*> known, std::string& unknown) {
  for (const auto& [key, value] : j.items()) {
    bool found = false;
    for (const char* k : known) {
      found = found || key == k;
    }
    if (!found) {
      unknown = key;
      return false;
    }
  }
  return true;
}

result<SecureAggregationConfig> parse_secure(const json& j) {
  SecureAggregationConfig c;
  std::string unknown;
  if (!j.is_object()) {
    return bad("secure_aggregation must be an object ({} for the defaults)");
  }
  if (!only_known(
          j, {"degree", "threshold", "clip_range", "quant_range", "stage_timeout_s", "bind_keys"},
          unknown)) {
    return bad("secure_aggregation: unknown field '" + unknown + "'");
  }
  auto degree = number(j, "degree", 0, 1024, 0);
  auto threshold = number(j, "threshold", 0, 1024, 0);
  auto clip = number(j, "clip_range", 1e-6, 1e6, 8.0);
  auto quant = number(j, "quant_range", 2, 4294967295.0, double(1u << 22));
  auto timeout = number(j, "stage_timeout_s", 0.1, 86400, 30);
  for (const auto* r : {&degree, &threshold, &clip, &quant, &timeout}) {
    if (!*r) {
      return bad("secure_aggregation." + r->error().message);
    }
  }
  if (std::floor(*degree) != *degree || std::floor(*threshold) != *threshold ||
      std::floor(*quant) != *quant) {
    return bad("secure_aggregation: degree, threshold and quant_range are integers");
  }
  c.settings.degree = static_cast<std::uint32_t>(*degree);
  c.settings.threshold = static_cast<std::uint32_t>(*threshold);
  c.settings.clip_range = *clip;
  c.settings.quant_range = static_cast<std::uint32_t>(*quant);
  c.stage_timeout_s = *timeout;
  if (j.contains("bind_keys")) {
    if (!j["bind_keys"].is_boolean()) {
      return bad("secure_aggregation.bind_keys must be true or false");
    }
    c.bind_keys = j["bind_keys"].get<bool>();
  }
  return c;
}

result<DpConfig> parse_dp(const json& j) {
  DpConfig c;
  std::string unknown;
  if (!j.is_object()) {
    return bad("dp must be an object");
  }
  if (!only_known(j, {"mode", "epsilon", "delta", "clip_norm", "noise_multiplier", "adaptive_clip"},
                  unknown)) {
    return bad("dp: unknown field '" + unknown + "'");
  }
  if (j.contains("mode")) {
    const auto mode = j["mode"].is_string()
                          ? protocol::dp_mode_from_name(j["mode"].get<std::string>())
                          : std::nullopt;
    if (!mode) {
      return bad("dp.mode must be none, record, client_central or client_distributed");
    }
    c.mode = *mode;
  }
  auto epsilon = number(j, "epsilon", 0, 1e4, 0);
  auto delta = number(j, "delta", 0, 0.1, 0);
  auto clip = number(j, "clip_norm", 0, 1e6, 0);
  auto noise = number(j, "noise_multiplier", 0, 1e4, 0);
  for (const auto* r : {&epsilon, &delta, &clip, &noise}) {
    if (!*r) {
      return bad("dp." + r->error().message);
    }
  }
  c.epsilon = *epsilon;
  c.delta = *delta;
  c.clip_norm = *clip;
  c.noise_multiplier = *noise;
  if (j.contains("adaptive_clip")) {
    const auto& a = j["adaptive_clip"];
    if (!a.is_object() ||
        !only_known(a, {"target_quantile", "learning_rate", "count_stddev"}, unknown)) {
      return bad(
          "dp.adaptive_clip must be an object of target_quantile, learning_rate, count_stddev");
    }
    auto quantile = number(a, "target_quantile", 0.01, 0.99, 0.5);
    auto rate = number(a, "learning_rate", 1e-6, 10, 0.2);
    auto stddev = number(a, "count_stddev", 1e-6, 1e6, 1);
    for (const auto* r : {&quantile, &rate, &stddev}) {
      if (!*r) {
        return bad("dp.adaptive_clip." + r->error().message);
      }
    }
    c.adaptive = AdaptiveClipConfig{*quantile, *rate, *stddev};
  }
  if (c.mode != protocol::DpMode::none) {
    if (!(c.epsilon > 0) || !(c.delta > 0)) {
      return bad("dp: a DP run states its budget: epsilon > 0 and 0 < delta <= 0.1");
    }
    if (!(c.clip_norm > 0)) {
      return bad("dp.clip_norm must be positive");
    }
  }
  return c;
}

}  // namespace

result<PrivacyConfig> parse_privacy_config(const json& j) {
  PrivacyConfig c;
  std::string unknown;
  if (!j.is_object()) {
    return bad("must be an object");
  }
  if (!only_known(j, {"secure_aggregation", "dp"}, unknown)) {
    return bad("unknown field '" + unknown + "'");
  }
  if (j.contains("secure_aggregation")) {
    auto secure = parse_secure(j["secure_aggregation"]);
    if (!secure) {
      return secure.error();
    }
    c.secure_aggregation = *secure;
  }
  if (j.contains("dp")) {
    auto dp = parse_dp(j["dp"]);
    if (!dp) {
      return dp.error();
    }
    c.dp = *dp;
  }
  return c;
}

json to_json(const PrivacyConfig& c) {
  json j = json::object();
  if (c.secure_aggregation) {
    const auto& s = *c.secure_aggregation;
    j["secure_aggregation"] = {
        {"degree", s.settings.degree},          {"threshold", s.settings.threshold},
        {"clip_range", s.settings.clip_range},  {"quant_range", s.settings.quant_range},
        {"stage_timeout_s", s.stage_timeout_s}, {"bind_keys", s.bind_keys}};
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
    if (run.strategy != "fedavg" && run.strategy != "fedprox") {
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
          "sparse compression sends each update's indices in the clear; secure "
          "aggregation needs dense inputs");
    }
    if (run.min_clients < 3) {
      return refuse(
          "secure aggregation needs min_clients >= 3 (with two, each learns the "
          "other's update from the sum)");
    }
  }
  if (privacy.dp.adaptive && (privacy.dp.mode != protocol::DpMode::client_central || secure)) {
    return refuse(
        "adaptive clipping needs each update's norm at the server: dp.mode "
        "client_central without secure aggregation");
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
    return refuse("client-level DP-FedAvg bounds each client's influence on a mean; strategy '" +
                  run.strategy + "' is not a mean");
  }
  return {};
}

}  // namespace fedcore::federation
