#include "server/federation/run_config.hpp"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "server/federation/robust_strategy.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::federation {
namespace {

using nlohmann::json;

constexpr std::string_view kKeys[] = {"name",
                                      "model",
                                      "strategy",
                                      "strategy_options",
                                      "compression",
                                      "rounds",
                                      "clients_per_round",
                                      "fraction",
                                      "min_clients",
                                      "min_available_clients",
                                      "over_selection",
                                      "client_sampling",
                                      "batch_norm",
                                      "local_epochs",
                                      "batch_size",
                                      "optimizer",
                                      "proximal_mu",
                                      "round_timeout_s",
                                      "seed",
                                      "max_update_norm",
                                      "max_samples_per_client",
                                      "federated_evaluation",
                                      "evaluate_every",
                                      "evaluation_clients",
                                      "evaluation_timeout_s",
                                      "server_test_set",
                                      "label_column",
                                      "wait_for_clients_s",
                                      "on_failed_round",
                                      "max_retries",
                                      "manual",
                                      "privacy",
                                      "feature_scaling"};

const JsonPath kRoot("run config");

}  // namespace

result<RunConfig> parse_run_config(std::string_view json_text) {
  auto j = parse_json_strict(json_text, "run config");
  if (!j) {
    return j.error();
  }
  return run_config_from_json(*j);
}

// What a run with BatchNorm layers cannot do, in words; null when it can. Rounds carry the
// running statistics after the parameters (model/federated_vector.hpp), averaged like them
// or kept at the sites (FedBN).
static const char* batch_norm_refusal(const RunConfig& c) {
  const bool has_batch_norm = model::has_batch_norm(c.model);
  if (c.batch_norm == BatchNormMode::local) {
    if (c.model.type == model::ModelType::external && !has_batch_norm) {
      return "'batch_norm' \"local\" (FedBN) keeps normalisation layers at the sites; this "
             "external model's layout marks no tensor \"normalization\": true "
             "(python: fedcore.torch.spec_of marks BatchNorm's)";
    }
    if (!has_batch_norm) {
      return "'batch_norm' \"local\" (FedBN) keeps BatchNorm layers at the sites; this model "
             "has none (a mobilenetv2, or a cnn with \"batch_norm\": true, has)";
    }
    if (!c.server_test_set.empty()) {
      return "'server_test_set' needs one global model; with 'batch_norm' \"local\" (FedBN) "
             "every site evaluates with its own BatchNorm (federated evaluation)";
    }
  }
  if (!has_batch_norm) {
    return nullptr;
  }
  if (c.strategy == "scaffold") {
    return "strategy \"scaffold\" corrects gradients with control variates, which BatchNorm's "
           "running statistics do not have";
  }
  if (c.privacy.dp.mode == protocol::DpMode::record) {
    return "record-level DP (DP-SGD) bounds each record's gradient, but BatchNorm mixes the "
           "records of a batch, so no record's influence is bounded";
  }
  if (c.privacy.dp.mode != protocol::DpMode::none && c.batch_norm == BatchNormMode::averaged) {
    return "differential privacy would add noise to averaged BatchNorm running variances, "
           "which must stay positive; use 'batch_norm' \"local\" (FedBN), which keeps them "
           "at the sites";
  }
  return nullptr;
}

// What SCAFFOLD cannot run with (scaffold.hpp), in words; null when it can.
static const char* scaffold_refusal(const RunConfig& c) {
  // Option II's control variate, (x - y) / (K * lr), is the mean local gradient only when the
  // sites take plain SGD steps at that learning rate.
  if (c.optimizer.kind != model::OptimizerKind::sgd || c.optimizer.momentum != 0.0f ||
      c.optimizer.nesterov) {
    return "its control variates assume plain local SGD (optimizer kind \"sgd\" without "
           "momentum)";
  }
  if (c.proximal_mu > 0) {
    return "'proximal_mu' is FedProx's correction; SCAFFOLD corrects with control variates";
  }
  if (c.compression.up != protocol::UpdateEncoding::f32) {
    return "the update and the control variate travel as f32; 'compression' applies to other "
           "strategies";
  }
  if (c.model.type == model::ModelType::external) {
    return "an external model trains in the site's own code, which does not apply the "
           "control variates' correction";
  }
  if (c.privacy.dp.mode == protocol::DpMode::record) {
    return "record-level DP-SGD does not apply the control variates' correction";
  }
  return nullptr;
}

// "compression": {"up": "int8", "int8_block": 256} / {"up": "topk", "topk_fraction": 0.01}.
static result<protocol::CompressionTerms> parse_compression(const json& j, const JsonPath& at) {
  StrictObject o(j, at, {"up", "down", "int8_block", "topk_fraction"});
  std::string up = "none";
  o.choice("up", up, {"none", "f32", "f16", "int8", "topk"});
  std::string down = "none";
  o.choice("down", down, {"none", "f32", "f16"});
  protocol::CompressionTerms c;
  o.integer("int8_block", c.block, {protocol::kMinInt8Block, protocol::kMaxInt8Block});
  o.number("topk_fraction", c.topk_fraction, {0, 1, true});
  if (auto done = o.status(); !done) {
    return done.error();
  }
  c.up = protocol::encoding_from_name(up).value_or(protocol::UpdateEncoding::f32);
  c.down = down == "f16" ? protocol::UpdateEncoding::f16 : protocol::UpdateEncoding::f32;
  if (c.down != protocol::UpdateEncoding::f32 && c.up == protocol::UpdateEncoding::f32) {
    return at.key("down").bad(
        "needs a compressed \"up\": a site's step is taken against the f16 model it received "
        "and added to the model the server holds");
  }
  if (o.has("int8_block") && c.up != protocol::UpdateEncoding::int8) {
    return at.key("int8_block").bad("applies only to \"up\": \"int8\"");
  }
  if (o.has("topk_fraction") && c.up != protocol::UpdateEncoding::topk) {
    return at.key("topk_fraction").bad("applies only to \"up\": \"topk\"");
  }
  return c;
}

// The run config's "compression" as given back (API, history).
static json compression_json(const protocol::CompressionTerms& c) {
  json j{{"up", c.up == protocol::UpdateEncoding::f32
                    ? std::string("none")
                    : std::string(protocol::encoding_name(c.up))}};
  if (c.up == protocol::UpdateEncoding::int8) {
    j["int8_block"] = c.block;
  }
  if (c.up == protocol::UpdateEncoding::topk) {
    j["topk_fraction"] = c.topk_fraction;
  }
  if (c.down == protocol::UpdateEncoding::f16) {
    j["down"] = "f16";
  }
  return j;
}

result<RunConfig> run_config_from_json(const json& j) {
  StrictObject o(j, kRoot, kKeys);
  RunConfig c;
  o.string("name", c.name, {.max_size = 128});
  if (o.ok() && !o.has("model")) {
    o.reject("model", "is required, e.g. {\"type\": \"logreg\"}");
  }
  if (o.ok()) {
    auto spec = model::parse_model_spec(*o.find("model"), o.at("model"));
    if (o.take(spec)) {
      c.model = *spec;
      c.model_json = *o.find("model");
    }
  }
  o.choice("strategy", c.strategy, kStrategies);
  o.integer("rounds", c.rounds, {1, 100000});
  o.integer("clients_per_round", c.clients_per_round, {1, 1000000});
  o.number("fraction", c.fraction, {1e-6, 1});
  o.integer("min_clients", c.min_clients, {1, 1000000});
  o.integer("min_available_clients", c.min_available_clients, {0, 1000000});
  o.integer("over_selection", c.over_selection, {0, 1000000});
  std::string sampling = "uniform";
  o.choice("client_sampling", sampling, {"uniform", "weighted"});
  c.client_sampling = sampling == "weighted" ? ClientSampling::weighted : ClientSampling::uniform;
  std::string batch_norm = "averaged";
  o.choice("batch_norm", batch_norm, {"averaged", "local"});
  c.batch_norm = batch_norm == "local" ? BatchNormMode::local : BatchNormMode::averaged;
  o.integer("local_epochs", c.local_epochs, {1, 1000});
  o.integer("batch_size", c.batch_size, {1, 65536});
  o.number("proximal_mu", c.proximal_mu, {0, 100});
  o.number("round_timeout_s", c.round_timeout_s, {0.1, 86400});
  o.integer("seed", c.seed, {0, 9'000'000'000'000'000});
  o.number("max_update_norm", c.max_update_norm, {0, 1e12});
  o.integer("max_samples_per_client", c.max_samples_per_client, {0, std::int64_t{1} << 32});
  o.boolean("federated_evaluation", c.federated_evaluation);
  o.integer("evaluate_every", c.evaluate_every, {1, 100000});
  o.integer("evaluation_clients", c.evaluation_clients, {0, 1000000});
  o.number("evaluation_timeout_s", c.evaluation_timeout_s, {0.1, 86400});
  o.string("server_test_set", c.server_test_set);
  o.string("label_column", c.label_column);
  o.number("wait_for_clients_s", c.wait_for_clients_s, {0, 86400 * 7});
  std::string on_failed_round = "pause";
  o.choice("on_failed_round", on_failed_round, {"pause", "retry"});
  c.on_failed_round =
      on_failed_round == "retry" ? FailedRoundPolicy::retry : FailedRoundPolicy::pause;
  o.integer("max_retries", c.max_retries, {0, 100});
  o.boolean("manual", c.manual);
  std::string scaling(protocol::scaling_mode_name(c.feature_scaling));
  o.choice("feature_scaling", scaling, {"federated", "site", "none"});
  c.feature_scaling = protocol::scaling_mode_from_name(scaling).value_or(c.feature_scaling);
  if (o.ok()) {
    auto optimizer = model::optimizer_config_from_json(
        o.has("optimizer") ? *o.find("optimizer") : json::object(), o.at("optimizer"));
    if (o.take(optimizer)) {
      c.optimizer = *optimizer;
      c.optimizer_json = json(*optimizer);
    }
  }
  if (o.ok()) {
    auto strategy =
        parse_strategy_config(c.strategy, o.find("strategy_options"), o.at("strategy_options"));
    if (o.take(strategy)) {
      c.strategy_config = *strategy;
    }
  }
  if (o.ok() && o.has("compression")) {
    auto compression = parse_compression(*o.find("compression"), o.at("compression"));
    if (o.take(compression)) {
      c.compression = *compression;
    }
  }
  if (o.ok() && o.has("privacy")) {
    auto privacy = parse_privacy_config(*o.find("privacy"), o.at("privacy"));
    if (o.take(privacy)) {
      c.privacy = *privacy;
    }
  }
  if (auto done = o.status(); !done) {
    return done.error();
  }
  // Rules between fields.
  if (o.has("clients_per_round") && o.has("fraction")) {
    return kRoot.bad("give 'clients_per_round' or 'fraction', not both");
  }
  if (c.clients_per_round > 0 && c.min_clients > c.clients_per_round) {
    return kRoot.bad("'min_clients' (" + std::to_string(c.min_clients) +
                     ") exceeds 'clients_per_round' (" + std::to_string(c.clients_per_round) + ")");
  }
  if (c.min_available_clients > 0 && c.min_available_clients < c.min_clients) {
    // A round starts once min_clients are online in any case: the value would be ignored.
    return kRoot.bad("'min_available_clients' (" + std::to_string(c.min_available_clients) +
                     ") is below 'min_clients' (" + std::to_string(c.min_clients) +
                     "), which a round waits for anyway");
  }
  if (c.over_selection > 0 && c.privacy.secure_aggregation) {
    return kRoot.bad(
        "'over_selection' does not apply with secure aggregation: its threshold and dropout "
        "recovery decide whose update counts");
  }
  if (c.over_selection > 0 && c.privacy.dp.mode != protocol::DpMode::none) {
    return kRoot.bad(
        "'over_selection' does not apply with differential privacy: which sites count would "
        "depend on their speed, not on the random sample the privacy accountant assumes");
  }
  if (c.client_sampling == ClientSampling::weighted) {
    const char* with = c.over_selection > 0                          ? "'over_selection'"
                       : c.privacy.secure_aggregation                ? "secure aggregation"
                       : c.privacy.dp.mode != protocol::DpMode::none ? "differential privacy"
                                                                     : nullptr;
    if (with != nullptr) {
      return kRoot.bad(std::string("'client_sampling' \"weighted\" does not apply with ") + with +
                       ": its thresholds and accountants assume a uniform sample of distinct "
                       "clients");
    }
  }
  if (c.strategy == "fedprox" && !(c.proximal_mu > 0)) {
    return kRoot.bad("strategy \"fedprox\" needs 'proximal_mu' > 0");
  }
  if (c.strategy == "fedavg" && c.proximal_mu > 0) {
    // The sites would add the proximal term all the same, training FedProx under the name
    // FedAvg (fedcore-sim refuses --mu without --strategy fedprox for the same reason).
    return kRoot.bad("'proximal_mu' applies only to strategy \"fedprox\"");
  }
  if (c.strategy == "scaffold") {
    if (auto why = scaffold_refusal(c)) {
      return kRoot.bad(std::string("strategy \"scaffold\": ") + why);
    }
  }
  // A robust aggregator that cannot work with the round's size is refused now; with a
  // fraction the size is known only per round, where Strategy::refuse_finish fails a round
  // with too few updates in the same words.
  if (c.clients_per_round > 0) {
    if (auto why = check_robust_config(c.strategy_config, c.clients_per_round)) {
      return kRoot.bad(*why);
    }
  }
  if (auto why = batch_norm_refusal(c)) {
    return kRoot.bad(why);
  }
  if (c.model.type == model::ModelType::external && !c.server_test_set.empty()) {
    return kRoot.bad(
        "'server_test_set' needs a model Fedcore can build; an external model is "
        "evaluated by the sites (federated evaluation)");
  }
  if (!c.label_column.empty() && c.server_test_set.empty()) {
    return kRoot.bad("'label_column' applies only with a 'server_test_set'");
  }
  if (auto compatible = check_compatibility(
          c.privacy, {c.strategy, c.max_update_norm, c.federated_evaluation, c.min_clients,
                      c.compression.up == protocol::UpdateEncoding::f32
                          ? std::string("none")
                          : std::string(protocol::encoding_name(c.compression.up))});
      !compatible) {
    return compatible.error();
  }
  return c;
}

std::string to_json_text(const RunConfig& c) {
  json j{
      {"name", c.name},
      {"model", c.model_json},
      {"strategy", c.strategy},
      {"strategy_options", strategy_options_json(c.strategy_config)},
      {"compression", compression_json(c.compression)},
      {"rounds", c.rounds},
      {"min_clients", c.min_clients},
      {"min_available_clients", c.min_available_clients},
      {"over_selection", c.over_selection},
      {"client_sampling", c.client_sampling == ClientSampling::weighted ? "weighted" : "uniform"},
      {"batch_norm", c.batch_norm == BatchNormMode::local ? "local" : "averaged"},
      {"local_epochs", c.local_epochs},
      {"batch_size", c.batch_size},
      {"optimizer", c.optimizer_json},
      {"proximal_mu", c.proximal_mu},
      {"round_timeout_s", c.round_timeout_s},
      {"seed", c.seed},
      {"max_update_norm", c.max_update_norm},
      {"max_samples_per_client", c.max_samples_per_client},
      {"federated_evaluation", c.federated_evaluation},
      {"evaluate_every", c.evaluate_every},
      {"evaluation_clients", c.evaluation_clients},
      {"evaluation_timeout_s", c.evaluation_timeout_s},
      {"server_test_set", c.server_test_set},
      {"label_column", c.label_column},
      {"wait_for_clients_s", c.wait_for_clients_s},
      {"on_failed_round", c.on_failed_round == FailedRoundPolicy::pause ? "pause" : "retry"},
      {"max_retries", c.max_retries},
      {"manual", c.manual},
      {"privacy", to_json(c.privacy)},
      {"feature_scaling", protocol::scaling_mode_name(c.feature_scaling)}};
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

std::size_t clients_to_select(const RunConfig& c, std::size_t online) noexcept {
  return std::min(online,
                  clients_to_sample(c, online) + static_cast<std::size_t>(c.over_selection));
}

}  // namespace fedcore::federation
