#include "server/federation/run_config.hpp"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

namespace fedcore::federation {
namespace {

using nlohmann::json;

error bad(const std::string& message) {
  return fail(errc::invalid_argument, "run config: " + message);
}

// Fetches a number within [low, high] if present; returns the error text otherwise.
template <class T>
std::optional<error> read(const json& j, const char* key, T& out, double low, double high) {
  if (!j.contains(key)) {
    return std::nullopt;
  }
  const auto& v = j[key];
  const bool integral = std::is_integral_v<T>;
  if (!v.is_number() || (integral && !v.is_number_integer()) || !std::isfinite(v.get<double>()) ||
      v.get<double>() < low || v.get<double>() > high) {
    return bad(std::string("'") + key + "' must be " + (integral ? "an integer" : "a number") +
               " in [" + std::to_string(low) + ", " + std::to_string(high) + "], got " + v.dump());
  }
  out = v.get<T>();
  return std::nullopt;
}

}  // namespace

result<RunConfig> parse_run_config(std::string_view json_text) {
  auto j = json::parse(json_text, nullptr, false);
  if (j.is_discarded()) {
    return bad("not a JSON object");
  }
  return run_config_from_json(j);
}

result<RunConfig> run_config_from_json(const json& j) {
  if (!j.is_object()) {
    return bad("not a JSON object");
  }
  static const char* const kKnown[] = {"name",
                                       "model",
                                       "strategy",
                                       "rounds",
                                       "clients_per_round",
                                       "fraction",
                                       "min_clients",
                                       "local_epochs",
                                       "batch_size",
                                       "optimizer",
                                       "proximal_mu",
                                       "round_timeout_s",
                                       "seed",
                                       "max_update_norm",
                                       "max_samples_per_client",
                                       "federated_evaluation",
                                       "server_test_set",
                                       "label_column",
                                       "wait_for_clients_s",
                                       "on_failed_round",
                                       "max_retries",
                                       "manual",
                                       "privacy"};
  for (const auto& [key, value] : j.items()) {
    if (std::none_of(std::begin(kKnown), std::end(kKnown),
                     [&](const char* k) { return key == k; })) {
      return bad("unknown field '" + key + "'");
    }
  }
  RunConfig c;
  if (j.contains("name")) {
    if (!j["name"].is_string() || j["name"].get_ref<const std::string&>().size() > 128) {
      return bad("'name' must be a string of at most 128 bytes");
    }
    c.name = j["name"].get<std::string>();
  }
  if (!j.contains("model")) {
    return bad("'model' is required, e.g. {\"type\": \"logreg\"}");
  }
  auto spec = model::parse_model_spec(j["model"]);
  if (!spec) {
    return bad(spec.error().message);
  }
  c.model = *spec;
  c.model_json = j["model"];
  if (j.contains("strategy")) {
    if (!j["strategy"].is_string() || (j["strategy"] != "fedavg" && j["strategy"] != "fedprox")) {
      return bad("'strategy' must be \"fedavg\" or \"fedprox\"");
    }
    c.strategy = j["strategy"].get<std::string>();
  }
  for (auto problem :
       {read(j, "rounds", c.rounds, 1, 100000),
        read(j, "clients_per_round", c.clients_per_round, 1, 1e6),
        read(j, "fraction", c.fraction, 1e-6, 1.0), read(j, "min_clients", c.min_clients, 1, 1e6),
        read(j, "local_epochs", c.local_epochs, 1, 1000),
        read(j, "batch_size", c.batch_size, 1, 65536),
        read(j, "proximal_mu", c.proximal_mu, 0, 100),
        read(j, "round_timeout_s", c.round_timeout_s, 0.1, 86400),
        read(j, "seed", c.seed, 0, 9.0e15), read(j, "max_update_norm", c.max_update_norm, 0, 1e12),
        read(j, "wait_for_clients_s", c.wait_for_clients_s, 0, 86400 * 7),
        read(j, "max_retries", c.max_retries, 0, 100),
        read(j, "max_samples_per_client", c.max_samples_per_client, 0, 4294967296.0)}) {
    if (problem) {
      return *problem;
    }
  }
  if (j.contains("clients_per_round") && j.contains("fraction")) {
    return bad("give 'clients_per_round' or 'fraction', not both");
  }
  if (c.clients_per_round > 0 && c.min_clients > c.clients_per_round) {
    return bad("'min_clients' (" + std::to_string(c.min_clients) +
               ") exceeds 'clients_per_round' (" + std::to_string(c.clients_per_round) + ")");
  }
  auto optimizer =
      model::optimizer_config_from_json(j.contains("optimizer") ? j["optimizer"] : json::object());
  if (!optimizer) {
    return bad(optimizer.error().message);
  }
  c.optimizer = *optimizer;
  c.optimizer_json = json(*optimizer);
  if (c.strategy == "fedprox" && c.proximal_mu <= 0) {
    return bad("strategy \"fedprox\" needs 'proximal_mu' > 0");
  }
  for (auto [key, target] : {std::pair{"federated_evaluation", &c.federated_evaluation},
                             std::pair{"manual", &c.manual}}) {
    if (j.contains(key)) {
      if (!j[key].is_boolean()) {
        return bad(std::string("'") + key + "' must be true or false");
      }
      *target = j[key].get<bool>();
    }
  }
  for (auto [key, target] : {std::pair{"server_test_set", &c.server_test_set},
                             std::pair{"label_column", &c.label_column}}) {
    if (j.contains(key)) {
      if (!j[key].is_string() || j[key].get_ref<const std::string&>().size() > 4096) {
        return bad(std::string("'") + key + "' must be a string");
      }
      *target = j[key].get<std::string>();
    }
  }
  if (j.contains("on_failed_round")) {
    if (j["on_failed_round"] == "pause") {
      c.on_failed_round = FailedRoundPolicy::pause;
    } else if (j["on_failed_round"] == "retry") {
      c.on_failed_round = FailedRoundPolicy::retry;
    } else {
      return bad("'on_failed_round' must be \"pause\" or \"retry\"");
    }
  }
  if (j.contains("privacy")) {
    auto privacy = parse_privacy_config(j["privacy"]);
    if (!privacy) {
      return privacy.error();
    }
    c.privacy = *privacy;
  }
  if (auto compatible = check_compatibility(
          c.privacy,
          {c.strategy, c.max_update_norm, c.federated_evaluation, c.min_clients, "none"});
      !compatible) {
    return compatible.error();
  }
  return c;
}

std::string to_json_text(const RunConfig& c) {
  json j{{"name", c.name},
         {"model", c.model_json},
         {"strategy", c.strategy},
         {"rounds", c.rounds},
         {"min_clients", c.min_clients},
         {"local_epochs", c.local_epochs},
         {"batch_size", c.batch_size},
         {"optimizer", c.optimizer_json},
         {"proximal_mu", c.proximal_mu},
         {"round_timeout_s", c.round_timeout_s},
         {"seed", c.seed},
         {"max_update_norm", c.max_update_norm},
         {"max_samples_per_client", c.max_samples_per_client},
         {"federated_evaluation", c.federated_evaluation},
         {"server_test_set", c.server_test_set},
         {"label_column", c.label_column},
         {"wait_for_clients_s", c.wait_for_clients_s},
         {"on_failed_round", c.on_failed_round == FailedRoundPolicy::pause ? "pause" : "retry"},
         {"max_retries", c.max_retries},
         {"manual", c.manual},
         {"privacy", to_json(c.privacy)}};
  if (c.clients_per_round > 0) {
    j["clients_per_round"] = c.clients_per_round;
  } else {
    j["fraction"] = c.fraction;
  }
  return j.dump();
}

std::size_t clients_to_sample(const RunConfig& c, std::size_t online) noexcept {
  if (c.clients_per_round > 0) {
    return std::min<std::size_t>(online, static_cast<std::size_t>(c.clients_per_round));
  }
  const auto wanted = static_cast<std::size_t>(std::ceil(c.fraction * double(online)));
  return std::min(online, std::max<std::size_t>(wanted, 1));
}

}  // namespace fedcore::federation
