// StrategyConfig: which aggregation strategy a run uses and its hyper-parameters, parsed
// from the run config's "strategy" and "strategy_options" (run_config.cpp) and handed to
// make_strategy (aggregate.hpp).
//
//   "strategy": "fedadam",
//   "strategy_options": {"server_lr": 0.01, "beta1": 0.9, "beta2": 0.99, "tau": 0.001}
//
// The families (docs/strategies.md gives each one's cost and what it tolerates):
//   fedavg, fedprox                 the sample-weighted mean (FedProx differs at the sites)
//   fedavgm, fedadam, fedyogi,      a server optimizer applied to the mean's step
//   fedadagrad                      (Reddi et al. 2021, "Adaptive Federated Optimization")
//   median, trimmed_mean, krum,     robust aggregators: every update of the round is held
//   multi_krum, bulyan,             (within memory_budget_bytes, beyond it in a scratch
//   centered_clipping               file under the run's directory); unweighted
//   scaffold                        control variates at the server and every site
//                                   (scaffold.hpp; Karimireddy et al. 2020)
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "shared/util/error.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::federation {

// Every strategy's name, as the run config and fedcore-sim --strategy accept them.
inline constexpr std::string_view kStrategies[] = {
    "fedavg",       "fedprox", "fedavgm",    "fedadam", "fedyogi",           "fedadagrad", "median",
    "trimmed_mean", "krum",    "multi_krum", "bulyan",  "centered_clipping", "scaffold"};

struct StrategyConfig {
  std::string name = "fedavg";

  // Server optimizers: x <- x + server_lr * step(m, v); scaffold: x <- x + server_lr * delta, with
  // the round's pseudo-gradient delta = mean - x. fedavgm: m = server_momentum * m + delta (no v).
  // The adaptive three keep m = beta1 * m + (1 - beta1) * delta and their own v; tau is their
  // epsilon.
  double server_lr = 1.0;
  double server_momentum = 0.9;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double tau = 1e-3;

  // Robust aggregators.
  std::size_t byzantine = 0;            // f: faulty clients tolerated (krum, multi_krum, bulyan)
  double trim_fraction = 0.1;           // beta: trimmed from each end per coordinate (trimmed_mean)
  std::size_t krum_selected = 0;        // m: updates multi_krum averages; 0 = n - f
  double clipping_radius = 1.0;         // tau of centered clipping, in parameter-space L2
  std::size_t clipping_iterations = 1;  // L of centered clipping
  // Where centered clipping centres: "model" (the round's global model: each site's step is
  // clipped to tau) or "previous_step" (the global model moved by the previous round's
  // aggregate step, the server-side form of the paper's momentum centre; kept as the
  // strategy's state across restarts).
  std::string clipping_center = "model";
  // Updates held in memory before the rest go to a scratch file (memory-mapped).
  std::size_t memory_budget_bytes = std::size_t{1} << 30;
  std::filesystem::path scratch_dir;  // where the scratch file goes; empty = the temp dir
};

// The options of strategy `name` from the run config's "strategy_options" object (null:
// none given, all defaults). Only the keys of that strategy are accepted: a key another
// strategy reads is refused, naming the strategy ("'strategy_options.beta2' does not
// apply to strategy \"fedavgm\""), so a misplaced option never silently does nothing.
// Ranges are checked here; make_strategy checks them again for programmatic configs.
result<StrategyConfig> parse_strategy_config(std::string_view name, const nlohmann::json* options,
                                             const JsonPath& at);

// The options `config.name` reads, as the run config gives them back (API, history).
nlohmann::json strategy_options_json(const StrategyConfig& config);

}  // namespace fedcore::federation
