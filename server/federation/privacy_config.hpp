// The privacy part of a run's configuration ("privacy" in the run JSON) and the
// compatibility rules between secure aggregation, differential privacy, the aggregator
// and compression (docs/privacy.md has the matrix as a table).
//
//   "privacy": {
//     "secure_aggregation": {              // absent: updates reach the server in the clear
//       "degree": 0, "threshold": 0,       // 0: chosen per round (secagg/plan.hpp)
//       "clip_range": 8.0,                 // per-coordinate clip of weight * delta
//       "quant_range": 4194304,            // 2^22 levels, lowered so n * q < 2^32
//       "stage_timeout_s": 30,             // each of the three stages after training
//       "bind_keys": true,                 // keys signed with the TLS client key
//       "per_client_evaluation": false     // true: each site's evaluation of the new model
//                                          // reaches the server (docs/privacy.md)
//     },
//     "dp": {
//       "mode": "record",                  // none | record | client_central | client_distributed
//       "epsilon": 8.0, "delta": 1e-5,     // the run's whole budget
//       "clip_norm": 1.0,                  // per example (record) or per update (client)
//       "noise_multiplier": 0,             // 0: the smallest that fits the budget
//       "adaptive_clip": {"target_quantile": 0.5, "learning_rate": 0.2, "count_stddev": 5}
//     }
//   }
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "shared/protocol/messages.hpp"
#include "shared/secagg/plan.hpp"
#include "shared/util/error.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::federation {

struct SecureAggregationConfig {
  secagg::SecAggSettings settings;
  double stage_timeout_s = 30;
  bool bind_keys = true;
  // Federated evaluation of a secure run. false (the default): the server learns only the
  // sum of the sites' metrics, carried in the next round's masked inputs. true: the sites
  // evaluate each new global model and send their own metrics, as in a plain run.
  bool per_client_evaluation = false;
};

// Adaptive clipping (Andrew et al. 2021), client_central without secure aggregation.
struct AdaptiveClipConfig {
  double target_quantile = 0.5;  // γ: the clip follows this quantile of update norms
  double learning_rate = 0.2;    // η
  double count_stddev = 0;       // σ_b on the count of unclipped updates; 2σ_b > z
};

struct DpConfig {
  protocol::DpMode mode = protocol::DpMode::none;
  double epsilon = 0;
  double delta = 0;
  double clip_norm = 0;         // initial clip when adaptive
  double noise_multiplier = 0;  // 0: calibrated to the budget at the run's first round
  std::optional<AdaptiveClipConfig> adaptive;
};

struct PrivacyConfig {
  std::optional<SecureAggregationConfig> secure_aggregation;
  DpConfig dp;
};

// Parsed strictly (shared/util/strict_json.hpp). Errors: invalid_argument naming the key
// path ("run config: 'privacy.dp.epsilon' must be a number in [0, 10000], got -1"), unknown
// keys included. "dp" needs its "mode"; with mode "none" its other keys are errors (they
// would be ignored); any other mode needs epsilon > 0, 0 < delta <= 0.1 and clip_norm > 0.
result<PrivacyConfig> parse_privacy_config(const nlohmann::json& j);
// The same at another place: `at` names the privacy object ("run config", "privacy").
result<PrivacyConfig> parse_privacy_config(const nlohmann::json& j, const JsonPath& at);
nlohmann::json to_json(const PrivacyConfig& config);

// What the rest of the run asks for, as the compatibility check sees it.
struct RunFeatures {
  std::string strategy;               // "fedavg", "fedprox", ...
  double max_update_norm = 0;         // a server-side check of each update's norm
  bool federated_evaluation = false;  // clients evaluate each global model
  std::int64_t min_clients = 1;
  std::string compression = "none";
};

// Ok, or invalid_argument naming the combination and why it cannot work, e.g. "secure
// aggregation hides each update, so the server cannot check its norm (max_update_norm);
// clip at the clients with privacy.secure_aggregation.clip_range".
result<void> check_compatibility(const PrivacyConfig& privacy, const RunFeatures& run);

}  // namespace fedcore::federation
