#include "client/site_policy.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace fedcore::client {

namespace {

constexpr std::chrono::hours kDay{24};

// "AB:CD:..." or "abcd..." -> 64 lowercase hex digits.
std::optional<std::string> normalize_fingerprint(std::string_view text) {
  std::string hex;
  for (const char c : text) {
    if (c == ':') {
      continue;
    }
    if (!std::isxdigit(static_cast<unsigned char>(c))) {
      return std::nullopt;
    }
    hex += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (hex.size() != 64) {
    return std::nullopt;
  }
  return hex;
}

result<ServerAcceptance> parse_server(const nlohmann::json& j, const JsonPath& at) {
  StrictObject o(j, at, {"sha256", "common_name"});
  ServerAcceptance s;
  if (const auto* value = o.ok() ? o.find("sha256") : nullptr) {
    // One fingerprint or a list (a rotation: the old and the new certificate).
    const auto where = o.at("sha256");
    const auto count = value->is_array() ? value->size() : 1;
    if (value->is_array() && value->empty()) {
      o.fail(where.bad("must name at least one fingerprint"));
    }
    for (std::size_t i = 0; i < count && o.ok(); ++i) {
      const auto& item = value->is_array() ? (*value)[i] : *value;
      auto hex = item.is_string() ? normalize_fingerprint(item.get_ref<const std::string&>())
                                  : std::nullopt;
      if (!hex) {
        o.fail((value->is_array() ? where.index(i) : where)
                   .bad("must be 64 hex digits (colons allowed), as printed by `openssl x509 "
                        "-noout -fingerprint -sha256`, got " +
                        describe_json(item)));
      } else {
        s.sha256.push_back(std::move(*hex));
      }
    }
  }
  o.string("common_name", s.common_name, {.min_size = 1, .max_size = 256});
  if (auto done = o.status(); !done) {
    return done.error();
  }
  return s;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    out += (out.empty() ? "" : ", ") + item;
  }
  return out;
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

result<SitePolicy> parse_site_policy(const nlohmann::json& j) {
  return parse_site_policy(j, JsonPath("client config", "policy"));
}

result<SitePolicy> parse_site_policy(const nlohmann::json& j, const JsonPath& at) {
  StrictObject o(j, at,
                 {"allowed_model_types", "max_parameters", "max_local_epochs", "max_rounds_per_day",
                  "require_secure_aggregation", "max_epsilon", "allow_evaluation",
                  "max_evaluations_per_day", "server"});
  SitePolicy p;
  if (const auto* types = o.ok() ? o.find("allowed_model_types") : nullptr) {
    // Only names a model spec can have: a misspelt one would refuse every run of the type.
    static constexpr std::string_view kTypes[] = {"logreg", "mlp", "cnn", "external",
                                                  "mobilenetv2"};
    const auto where = o.at("allowed_model_types");
    if (!types->is_array()) {
      o.fail(where.bad(
          "must be a list of model types (logreg, mlp, cnn, external, mobilenetv2), got " +
          describe_json(*types)));
    }
    for (std::size_t i = 0; o.ok() && i < types->size(); ++i) {
      auto type = json_choice((*types)[i], where.index(i), kTypes);
      if (o.take(type)) {
        p.allowed_model_types.push_back(std::move(*type));
      }
    }
  }
  o.integer("max_parameters", p.max_parameters, {1, std::int64_t{1} << 40});
  o.integer("max_local_epochs", p.max_local_epochs, {1, 1'000'000});
  o.integer("max_rounds_per_day", p.max_rounds_per_day, {1, 100'000});
  o.boolean("require_secure_aggregation", p.require_secure_aggregation);
  o.number("max_epsilon", p.max_epsilon, {0, 1e6, true});
  o.boolean("allow_evaluation", p.allow_evaluation);
  o.integer("max_evaluations_per_day", p.max_evaluations_per_day, {1, 100'000});
  if (o.ok() && o.has("server")) {
    auto server = parse_server(*o.find("server"), o.at("server"));
    if (o.take(server)) {
      p.server = std::move(*server);
    }
  }
  if (auto done = o.status(); !done) {
    return done.error();
  }
  return p;
}

std::string_view refusal_reason_name(RefusalReason reason) noexcept {
  switch (reason) {
    case RefusalReason::model_type:
      return "model_type";
    case RefusalReason::parameter_count:
      return "parameter_count";
    case RefusalReason::local_epochs:
      return "local_epochs";
    case RefusalReason::rounds_per_day:
      return "rounds_per_day";
    case RefusalReason::secure_aggregation:
      return "secure_aggregation";
    case RefusalReason::dp_required:
      return "dp_required";
    case RefusalReason::epsilon:
      return "epsilon";
    case RefusalReason::server_fingerprint:
      return "server_fingerprint";
    case RefusalReason::server_name:
      return "server_name";
    case RefusalReason::evaluation:
      return "evaluation";
    case RefusalReason::evaluations_per_day:
      return "evaluations_per_day";
  }
  return "unknown";
}

SitePolicyGate::SitePolicyGate(SitePolicy policy) : policy_(std::move(policy)) {}

std::size_t SitePolicyGate::rounds_within_day(Clock::steady_time now) const {
  return static_cast<std::size_t>(std::count_if(
      admitted_.begin(), admitted_.end(), [&](Clock::steady_time t) { return now - t < kDay; }));
}

std::optional<PolicyRefusal> SitePolicyGate::check_model(const nlohmann::json& model_spec,
                                                         std::size_t parameter_count) const {
  const auto& p = policy_;
  if (!p.allowed_model_types.empty()) {
    const auto type_field = model_spec.find("type");
    const std::string type = type_field != model_spec.end() && type_field->is_string()
                                 ? type_field->get<std::string>()
                                 : std::string();
    if (std::find(p.allowed_model_types.begin(), p.allowed_model_types.end(), type) ==
        p.allowed_model_types.end()) {
      return PolicyRefusal{RefusalReason::model_type,
                           "model type '" + type +
                               "' is not allowed (allowed: " + joined(p.allowed_model_types) + ")"};
    }
  }
  if (p.max_parameters && parameter_count > *p.max_parameters) {
    return PolicyRefusal{RefusalReason::parameter_count,
                         "the model has " + std::to_string(parameter_count) +
                             " parameters, more than the " + std::to_string(*p.max_parameters) +
                             " allowed"};
  }
  return std::nullopt;
}

std::optional<PolicyRefusal> SitePolicyGate::check(const protocol::TrainRequest& request,
                                                   std::size_t parameter_count,
                                                   Clock::steady_time now) const {
  const auto& p = policy_;
  if (auto refused = check_model(request.model_spec, parameter_count)) {
    return refused;
  }
  if (p.max_local_epochs && request.settings.epochs > *p.max_local_epochs) {
    return PolicyRefusal{RefusalReason::local_epochs, std::to_string(request.settings.epochs) +
                                                          " local epochs requested, at most " +
                                                          std::to_string(*p.max_local_epochs) +
                                                          " allowed"};
  }
  if (p.max_rounds_per_day && rounds_within_day(now) >= *p.max_rounds_per_day) {
    return PolicyRefusal{RefusalReason::rounds_per_day,
                         "already " + std::to_string(rounds_within_day(now)) +
                             " rounds in the last 24 hours, at most " +
                             std::to_string(*p.max_rounds_per_day) + " allowed"};
  }
  if (p.require_secure_aggregation && !request.privacy.secure_aggregation) {
    return PolicyRefusal{RefusalReason::secure_aggregation,
                         "secure aggregation is required, the run does not use it"};
  }
  if (p.max_epsilon) {
    if (request.privacy.dp == protocol::DpMode::none) {
      return PolicyRefusal{RefusalReason::dp_required,
                           "differential privacy with epsilon at most " + number(*p.max_epsilon) +
                               " is required, the run applies none"};
    }
    // An ε of 0 with DP on is no budget at all, not a perfect one: refused as unbounded.
    if (!(request.privacy.epsilon > 0) || request.privacy.epsilon > *p.max_epsilon) {
      return PolicyRefusal{RefusalReason::epsilon,
                           "the run's privacy budget epsilon " + number(request.privacy.epsilon) +
                               " is not within the allowed " + number(*p.max_epsilon)};
    }
  }
  return std::nullopt;
}

void SitePolicyGate::record_round(Clock::steady_time now) {
  if (!policy_.max_rounds_per_day) {
    return;
  }
  admitted_.push_back(now);
  // Only the last max_rounds_per_day admissions can ever decide a refusal.
  while (admitted_.size() > *policy_.max_rounds_per_day) {
    admitted_.pop_front();
  }
}

std::optional<PolicyRefusal> SitePolicyGate::admit(const protocol::TrainRequest& request,
                                                   std::size_t parameter_count,
                                                   Clock::steady_time now) {
  auto refused = check(request, parameter_count, now);
  if (!refused) {
    record_round(now);
  }
  return refused;
}

std::optional<PolicyRefusal> SitePolicyGate::check_evaluation(
    const protocol::EvaluateRequest& request, std::size_t parameter_count,
    Clock::steady_time now) const {
  const auto& p = policy_;
  if (!p.allow_evaluation) {
    return PolicyRefusal{RefusalReason::evaluation,
                         "this site does not evaluate models for the "
                         "server (allow_evaluation is false)"};
  }
  if (auto refused = check_model(request.model_spec, parameter_count)) {
    return refused;
  }
  if (p.max_evaluations_per_day) {
    const auto recent = static_cast<std::size_t>(std::count_if(
        evaluations_.begin(), evaluations_.end(), [&](auto t) { return now - t < kDay; }));
    if (recent >= *p.max_evaluations_per_day) {
      return PolicyRefusal{RefusalReason::evaluations_per_day,
                           "already " + std::to_string(recent) +
                               " evaluations in the last 24 hours, at most " +
                               std::to_string(*p.max_evaluations_per_day) + " allowed"};
    }
  }
  if (p.max_epsilon) {
    return PolicyRefusal{RefusalReason::dp_required,
                         "differential privacy is required, and evaluation metrics leave the "
                         "site outside any privacy budget"};
  }
  return std::nullopt;
}

std::optional<PolicyRefusal> SitePolicyGate::admit_evaluation(
    const protocol::EvaluateRequest& request, std::size_t parameter_count, Clock::steady_time now) {
  auto refused = check_evaluation(request, parameter_count, now);
  if (!refused && policy_.max_evaluations_per_day) {
    evaluations_.push_back(now);
    while (evaluations_.size() > *policy_.max_evaluations_per_day) {
      evaluations_.pop_front();
    }
  }
  return refused;
}

std::optional<PolicyRefusal> SitePolicyGate::check_server(const ServerIdentity& server) const {
  const auto& accepted = policy_.server;
  if (!accepted.sha256.empty() && std::find(accepted.sha256.begin(), accepted.sha256.end(),
                                            server.sha256) == accepted.sha256.end()) {
    return PolicyRefusal{RefusalReason::server_fingerprint,
                         "the server certificate's SHA-256 fingerprint " + server.sha256 +
                             " is not one the site accepts"};
  }
  if (!accepted.common_name.empty() && server.common_name != accepted.common_name) {
    return PolicyRefusal{RefusalReason::server_name, "the server certificate's name '" +
                                                         server.common_name + "' is not '" +
                                                         accepted.common_name + "'"};
  }
  return std::nullopt;
}

}  // namespace fedcore::client
