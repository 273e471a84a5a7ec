#include "client/site_policy.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace fedcore::client {

namespace {

constexpr std::chrono::hours kDay{24};

error bad(std::string_view field, std::string_view what) {
  return fail(errc::invalid_argument, "policy." + std::string(field) + ": " + std::string(what));
}

// A positive integer no larger than `max`.
template <class T>
result<T> positive_integer(const nlohmann::json& j, std::string_view field, std::uint64_t max) {
  if (!j.is_number_integer()) {
    return bad(field, "must be a positive integer");
  }
  if (j.is_number_unsigned() ? j.get<std::uint64_t>() == 0 : j.get<std::int64_t>() <= 0) {
    return bad(field, "must be a positive integer");
  }
  const auto value = j.get<std::uint64_t>();
  if (value > max) {
    return bad(field, "must be at most " + std::to_string(max));
  }
  return static_cast<T>(value);
}

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

result<ServerAcceptance> parse_server(const nlohmann::json& j) {
  if (!j.is_object()) {
    return bad("server", "must be an object");
  }
  ServerAcceptance s;
  for (const auto& [key, value] : j.items()) {
    if (key == "sha256") {
      // One fingerprint or a list (a rotation: the old and the new certificate).
      const auto list = value.is_array() ? value : nlohmann::json::array({value});
      if (list.empty()) {
        return bad("server.sha256", "must name at least one fingerprint");
      }
      for (const auto& item : list) {
        auto hex = item.is_string() ? normalize_fingerprint(item.get<std::string>()) : std::nullopt;
        if (!hex) {
          return bad("server.sha256",
                     "each fingerprint must be 64 hex digits (colons allowed), as printed by "
                     "`openssl x509 -noout -fingerprint -sha256`");
        }
        s.sha256.push_back(std::move(*hex));
      }
    } else if (key == "common_name") {
      if (!value.is_string() || value.get<std::string>().empty()) {
        return bad("server.common_name", "must be a non-empty string");
      }
      s.common_name = value.get<std::string>();
    } else {
      return bad("server", "unknown field '" + key + "' (known: sha256, common_name)");
    }
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
  if (!j.is_object()) {
    return fail(errc::invalid_argument, "policy: must be a JSON object");
  }
  SitePolicy p;
  for (const auto& [key, value] : j.items()) {
    if (key == "allowed_model_types") {
      if (!value.is_array()) {
        return bad(key, "must be a list of model type names");
      }
      for (const auto& type : value) {
        if (!type.is_string() || type.get<std::string>().empty()) {
          return bad(key, "every entry must be a non-empty string");
        }
        p.allowed_model_types.push_back(type.get<std::string>());
      }
    } else if (key == "max_parameters") {
      auto v = positive_integer<std::uint64_t>(value, key, std::uint64_t{1} << 40);
      if (!v) {
        return v.error();
      }
      p.max_parameters = *v;
    } else if (key == "max_local_epochs") {
      auto v = positive_integer<std::int32_t>(value, key, 1'000'000);
      if (!v) {
        return v.error();
      }
      p.max_local_epochs = *v;
    } else if (key == "max_rounds_per_day") {
      auto v = positive_integer<std::uint32_t>(value, key, 100'000);
      if (!v) {
        return v.error();
      }
      p.max_rounds_per_day = *v;
    } else if (key == "require_secure_aggregation") {
      if (!value.is_boolean()) {
        return bad(key, "must be true or false");
      }
      p.require_secure_aggregation = value.get<bool>();
    } else if (key == "max_epsilon") {
      if (!value.is_number() || !(value.get<double>() > 0) || !(value.get<double>() <= 1e6)) {
        return bad(key, "must be a positive number (at most 1e6)");
      }
      p.max_epsilon = value.get<double>();
    } else if (key == "server") {
      auto server = parse_server(value);
      if (!server) {
        return server.error();
      }
      p.server = std::move(*server);
    } else {
      return fail(errc::invalid_argument,
                  "policy: unknown field '" + key +
                      "' (known: allowed_model_types, max_parameters, max_local_epochs, "
                      "max_rounds_per_day, require_secure_aggregation, max_epsilon, server)");
    }
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
  }
  return "unknown";
}

SitePolicyGate::SitePolicyGate(SitePolicy policy) : policy_(std::move(policy)) {}

std::size_t SitePolicyGate::rounds_within_day(Clock::steady_time now) const {
  return static_cast<std::size_t>(std::count_if(
      admitted_.begin(), admitted_.end(), [&](Clock::steady_time t) { return now - t < kDay; }));
}

std::optional<PolicyRefusal> SitePolicyGate::check(const protocol::TrainRequest& request,
                                                   std::size_t parameter_count,
                                                   Clock::steady_time now) const {
  const auto& p = policy_;
  if (!p.allowed_model_types.empty()) {
    const auto type_field = request.model_spec.find("type");
    const std::string type = type_field != request.model_spec.end() && type_field->is_string()
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
