// RunConfig: everything that defines a federated run, parsed from the JSON an admin
// submits (a file given to fedcore-server --run now, POST /api/v1/runs later).
//
//   {
//     "name": "breast-cancer-fedavg",
//     "model": {"type": "logreg"},              // a model spec (model/spec.hpp)
//     "strategy": "fedavg",                     // or "fedprox" (needs proximal_mu > 0),
//                                               // a server optimizer or a robust aggregator
//     "strategy_options": {...},                // that strategy's options (strategy_config.hpp)
//     "rounds": 5,
//     "clients_per_round": 3,                   // or "fraction": 0.5 (of online clients)
//     "min_clients": 2,                         // quorum
//     "min_available_clients": 0,               // online before a round starts; 0 = min_clients
//     "over_selection": 0,                      // extra clients selected; see below
//     "client_sampling": "uniform",             // or "weighted" by samples; see below
//     "batch_norm": "averaged",                 // or "local" (FedBN); see below
//     "local_epochs": 1, "batch_size": 32,
//     "optimizer": {"kind": "sgd", "lr": 0.1},  // optimizer config (model/optimizer.hpp)
//     "proximal_mu": 0.0,
//     "round_timeout_s": 60,
//     "seed": 1,
//     "max_update_norm": 0,                     // 0 = no norm bound
//     "max_samples_per_client": 0,              // FedAvg weight cap per update; 0 = no cap
//     "federated_evaluation": true,             // clients evaluate each global model
//     "evaluate_every": 1,                      // ... of every k-th round (and the last)
//     "evaluation_clients": 0,                  // at most this many per round; 0 = all
//     "evaluation_timeout_s": 60,               // how long a round waits for evaluations
//     "server_test_set": "",                    // a CSV path the server evaluates on, or ""
//     "label_column": "",                       // label column of server_test_set
//     "wait_for_clients_s": 300,                // how long a round waits for enough clients
//     "on_failed_round": "pause",               // "pause" or "retry"
//     "max_retries": 2,                         // retries of a failed round before pausing
//     "manual": false,                          // true: each round waits for an admin
//     "privacy": {...},                         // secure aggregation and DP (privacy_config.hpp)
//     "feature_scaling": "federated",           // or "site", "none" (feature_scaling.hpp)
//     "compression": {"up": "int8"}             // or "f16", "topk" (+ "topk_fraction"), "none"
//   }
//
// Over-selection (Bonawitz et al. 2019, "Towards Federated Learning at Scale"): a round
// selects over_selection clients more than it needs and closes as soon as the clients it
// needs (clients_per_round, or the fraction of those online) have sent accepted updates;
// the selected clients still training are recorded "late", so one slow site never sets the
// federation's pace. Their updates, when they come, are refused as stale, and a site still
// busy with a round it was late for is not selected again until it has answered. Not with
// secure aggregation (its threshold decides who counts) nor differential privacy (who
// counts would depend on speed, not on the random sample the accountant assumes).
//
// Client sampling. "uniform": a seeded uniform sample of the eligible clients, each update
// weighted by its samples (FedAvg). "weighted": the round draws its clients_per_round
// (or fraction) picks with replacement, each with probability proportional to the samples the
// client declared in its HELLO, and weighs each selected client's update by how many times it
// was drawn, not by its samples (Li et al. 2020, "On the Convergence of FedAvg on Non-IID
// Data", scheme I): the expected aggregate is FedAvg's sample-weighted mean over all clients,
// and large sites take part more often instead of weighing more. A client drawn twice
// trains once. Not with over_selection, secure aggregation or differential privacy (their
// thresholds and accountants assume a uniform sample of distinct clients).
//
// BatchNorm (a mobilenetv2, a cnn with "batch_norm": true): rounds carry the running
// statistics after the parameters (shared/model/federated_vector.hpp). "averaged": the
// server aggregates them with the parameters (what FedAvg over a PyTorch state_dict does).
// "local" (FedBN, Li et al. 2021): every BatchNorm layer's weight, bias and statistics stay
// at each site; the sites send the global model's values there, the server keeps those
// values as they were, and each site trains and evaluates with its own. Not with a server
// test set (no global BatchNorm to evaluate with); never with SCAFFOLD or record-level DP,
// and user-level DP only with "local" (noise on averaged variances could make them negative).
//
// A round that fails (no quorum) is recorded as failed. With "retry" it is run again
// (fresh sample, fresh nonces) up to max_retries times, then the run pauses; with "pause"
// the run pauses at once. A paused run never spins: it waits for an admin.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/federation/privacy_config.hpp"
#include "server/federation/strategy_config.hpp"
#include "shared/model/optimizer.hpp"
#include "shared/model/spec.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/util/error.hpp"

namespace fedcore::federation {

enum class FailedRoundPolicy { pause, retry };
enum class ClientSampling { uniform, weighted };
enum class BatchNormMode { averaged, local };

struct RunConfig {
  std::string name;
  model::ModelSpec model;     // may be incomplete; completed from the clients' HELLO schema
  nlohmann::json model_json;  // as submitted
  std::string strategy = "fedavg";
  StrategyConfig strategy_config;  // its options; strategy_config.name == strategy
  // How the sites send their updates (shared/protocol/update_encoding.hpp); f32 = as is.
  protocol::CompressionTerms compression;
  std::int64_t rounds = 1;
  std::int64_t clients_per_round = 0;  // 0: use fraction
  double fraction = 1.0;
  std::int64_t min_clients = 1;
  // How many eligible clients must be online before a round starts (Flower's
  // min_available_clients); 0 means min_clients. A simulation that waits for all its sites
  // selects from the same set every round, whatever the timing of reconnects.
  std::int64_t min_available_clients = 0;
  std::int64_t over_selection = 0;  // extra clients a round selects beyond what it needs
  ClientSampling client_sampling = ClientSampling::uniform;  // see the header comment
  BatchNormMode batch_norm = BatchNormMode::averaged;        // see the header comment
  std::int32_t local_epochs = 1;
  std::int32_t batch_size = 32;
  model::OptimizerConfig optimizer;
  nlohmann::json optimizer_json;  // `optimizer` as an object, for TRAIN messages
  float proximal_mu = 0.0f;
  double round_timeout_s = 60;
  std::uint64_t seed = 1;
  double max_update_norm = 0;
  // An update's FedAvg weight is min(its samples, this) (0 = no cap), so that no site,
  // whatever it holds or claims, outweighs the others by more than the admin allows. Its
  // samples are also bounded by what its HELLO declared (Round, round.hpp).
  std::uint64_t max_samples_per_client = 0;
  // Federated evaluation (docs/protocol.md, "Federated evaluation"): after a round's
  // aggregation the round's participants evaluate the new global model on their test splits
  // before the round commits; every evaluate_every-th round, and always the last round,
  // whose model every client that took part in the run evaluates. A round asks at most
  // evaluation_clients participants (0 = all; a seeded sample) and waits at most
  // evaluation_timeout_s for their answers.
  bool federated_evaluation = true;
  std::int64_t evaluate_every = 1;
  std::int64_t evaluation_clients = 0;
  double evaluation_timeout_s = 60;
  // A CSV path, or "fashion-mnist" / "fashion-mnist:DIR" for that data set's test split.
  std::string server_test_set;
  std::string label_column;
  double wait_for_clients_s = 300;
  FailedRoundPolicy on_failed_round = FailedRoundPolicy::pause;
  std::int32_t max_retries = 2;
  bool manual = false;  // rounds start only on FederationServer::advance_round
  PrivacyConfig privacy;
  // How sites standardise tabular features (server/federation/feature_scaling.hpp): one
  // scale estimated from every site's statistics before the first round (the default), each
  // site's own statistics, or none.
  protocol::ScalingMode feature_scaling = protocol::ScalingMode::federated;
};

// Parses and validates strictly (shared/util/strict_json.hpp, docs/config.md): every
// problem is errc::invalid_argument naming the full key path, e.g.
//   run config: 'rounds' must be an integer in [1, 100000], got 1.5
//   run config: unknown key 'roundz'; did you mean 'rounds'?
//   run config: 'privacy.dp.epsilon' must be a number in [0, 10000], got -1
// Keys that would be ignored are errors too: 'proximal_mu' > 0 without strategy "fedprox",
// 'label_column' without 'server_test_set', keys of the other model type or optimizer kind.
// The text form also refuses invalid JSON, duplicate keys and nesting past 64 levels; a
// model spec too large to build is errc::resource_exhausted. Never throws.
result<RunConfig> parse_run_config(std::string_view json_text);
// The same from JSON already parsed (fedcore-sim builds its configuration as JSON).
result<RunConfig> run_config_from_json(const nlohmann::json& j);
// The canonical JSON of a config (what the store keeps).
std::string to_json_text(const RunConfig& config);

// How many accepted updates a round needs out of `online` eligible clients.
std::size_t clients_to_sample(const RunConfig& config, std::size_t online) noexcept;
// How many clients a round selects: what it needs plus over_selection, at most `online`.
std::size_t clients_to_select(const RunConfig& config, std::size_t online) noexcept;

}  // namespace fedcore::federation
