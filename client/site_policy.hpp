// Site policy: what the hospital agrees to, decided at the hospital, not at the server.
//
// The server proposes (a model, epochs, privacy terms, in every TRAIN); the site checks the
// proposal against limits its own staff wrote into the daemon's config, under "policy":
//
//   "policy": {
//     "allowed_model_types": ["logreg", "mlp"],   // model spec "type"s; absent or [] = any
//     "max_parameters": 1000000,                  // parameters of the model (payload floats)
//     "max_local_epochs": 5,
//     "max_rounds_per_day": 24,                   // rounds admitted in any rolling 24 h
//     "require_secure_aggregation": true,
//     "max_epsilon": 8.0,                         // DP required, with a budget of at most ε
//     "allow_evaluation": true,                   // answer the server's EVALUATE requests
//     "max_evaluations_per_day": 48,              // evaluations admitted in any rolling 24 h
//     "server": {"sha256": ["AB:CD:..."],         // accepted server certificate fingerprints
//                "common_name": "fedcore-server"} // and/or the server certificate's CN
//   }
//
// Every field is optional; an absent limit does not limit. A run with "dp": "none", or an
// ε above max_epsilon, is refused when max_epsilon is set (any DP mode within the budget
// is accepted). Unknown keys are errors, so that a misspelt limit is never silently
// ignored.
//
// An EVALUATE (the server asks the site to evaluate a model on its test split, without
// training; docs/protocol.md) is checked by check_evaluation: refused when allow_evaluation is
// false, when max_evaluations_per_day evaluations were admitted in the last 24 h, when the
// site requires DP (max_epsilon: the metrics would leave outside any privacy budget), and
// for the model type and parameter count as a TRAIN is. Round, epoch and secure-aggregation
// limits are about training and do not apply.
//
// The rounds-per-day window counts the rounds this site admitted (record_round) in the last
// 24 hours of the injected clock's steady time; it lives in memory, so a restarted daemon
// starts a fresh window (the audit log, client/audit_log.hpp, keeps the durable record).
//
// Thread safety: none; the daemon's io thread owns its policy.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/protocol/messages.hpp"
#include "shared/util/clock.hpp"
#include "shared/util/error.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::client {

// Which server the site accepts, checked right after the TLS handshake (on top of the
// federation CA and the host name, which the TLS context already checks).
struct ServerAcceptance {
  // Lowercase hex SHA-256 digests of the DER certificate, without colons; empty = any.
  std::vector<std::string> sha256;
  std::string common_name;  // the certificate's subject CN; empty = any
};

struct SitePolicy {
  std::vector<std::string> allowed_model_types;  // empty = any
  std::optional<std::uint64_t> max_parameters;
  std::optional<std::int32_t> max_local_epochs;
  std::optional<std::uint32_t> max_rounds_per_day;
  bool require_secure_aggregation = false;
  std::optional<double> max_epsilon;  // set: DP required, ε at most this
  bool allow_evaluation = true;
  std::optional<std::uint32_t> max_evaluations_per_day;
  ServerAcceptance server;
};

// Parses the "policy" object strictly (shared/util/strict_json.hpp). Errors:
// invalid_argument naming the key path ("client config: 'policy.max_epsilon' must be a
// number in (0, 1000000], got 0") for a value of the wrong type or range, an unknown key
// (with the closest known one), a model type other than logreg, mlp and cnn, a fingerprint
// that is not 64 hex digits (colons allowed), or a non-object.
result<SitePolicy> parse_site_policy(const nlohmann::json& j);
// The same with the messages naming `at` as the policy's place.
result<SitePolicy> parse_site_policy(const nlohmann::json& j, const JsonPath& at);

// Why a request (or a server) was refused. The names (refusal_reason_name) are stable: they
// are written to the audit log and begin the words of the ERROR sent to the server.
enum class RefusalReason {
  model_type,           // the model's type is not in allowed_model_types
  parameter_count,      // more parameters than max_parameters
  local_epochs,         // more local epochs than max_local_epochs
  rounds_per_day,       // max_rounds_per_day rounds already admitted in the last 24 h
  secure_aggregation,   // secure aggregation required, the run does not use it
  dp_required,          // max_epsilon set, the run applies no differential privacy
  epsilon,              // the run's ε is above max_epsilon
  server_fingerprint,   // the server certificate's SHA-256 is not an accepted one
  server_name,          // the server certificate's CN is not the accepted one
  evaluation,           // allow_evaluation is false
  evaluations_per_day,  // max_evaluations_per_day evaluations already admitted in the last 24 h
};
std::string_view refusal_reason_name(RefusalReason reason) noexcept;

struct PolicyRefusal {
  RefusalReason reason;
  std::string words;  // for people: "model type 'cnn' is not allowed (allowed: logreg)"
};

// What the site learnt of the server's certificate after the handshake.
struct ServerIdentity {
  std::string sha256;  // lowercase hex, no colons
  std::string common_name;
};

class SitePolicyGate {
 public:
  explicit SitePolicyGate(SitePolicy policy = {});

  // Checks one TRAIN request; `parameter_count` is the number of floats in its payload.
  // Checks in the order of RefusalReason and reports the first that fails. Does not count
  // the round: call record_round() for a request that is served.
  std::optional<PolicyRefusal> check(const protocol::TrainRequest& request,
                                     std::size_t parameter_count, Clock::steady_time now) const;
  // Counts an admitted round at `now` toward max_rounds_per_day.
  void record_round(Clock::steady_time now);
  // check(), then record_round() when it passes.
  std::optional<PolicyRefusal> admit(const protocol::TrainRequest& request,
                                     std::size_t parameter_count, Clock::steady_time now);

  // Checks one EVALUATE request (see the file comment); `parameter_count` is the number of
  // floats in its payload. Does not count it: admit_evaluation() does.
  std::optional<PolicyRefusal> check_evaluation(const protocol::EvaluateRequest& request,
                                                std::size_t parameter_count,
                                                Clock::steady_time now) const;
  // check_evaluation(), then counts the evaluation toward max_evaluations_per_day.
  std::optional<PolicyRefusal> admit_evaluation(const protocol::EvaluateRequest& request,
                                                std::size_t parameter_count,
                                                Clock::steady_time now);

  // Checks the server's certificate against policy.server.
  std::optional<PolicyRefusal> check_server(const ServerIdentity& server) const;

  const SitePolicy& policy() const noexcept { return policy_; }

 private:
  std::size_t rounds_within_day(Clock::steady_time now) const;
  // The model type and parameter count limits, shared by TRAIN and EVALUATE.
  std::optional<PolicyRefusal> check_model(const nlohmann::json& model_spec,
                                           std::size_t parameter_count) const;

  SitePolicy policy_;
  // Admission times of the last max_rounds_per_day rounds, oldest first (bounded).
  std::deque<Clock::steady_time> admitted_;
  // The same for evaluations and max_evaluations_per_day.
  std::deque<Clock::steady_time> evaluations_;
};

}  // namespace fedcore::client
