// The robust aggregators at scale (issue 18): n updates of d parameters through the
// strategy exactly as a round feeds it (begin_round, add_update per update, finish_round),
// with a memory budget, so that the server's peak RSS and the scratch file's size can be
// read next to the time each phase takes.
//
//   build/release/bench/robust_aggregation_bench --rule median --clients 100
//       --params 10000000 --budget-mb 512 [--scratch DIR] [--byzantine F]   (one line)
//
// Prints one JSON object: the rule, n, d, the budget, the seconds spent copying the updates
// in and aggregating, the bytes held in memory and spilled, and the process's peak RSS
// (getrusage) before the round and after it. Updates are drawn from a seeded normal
// distribution around a zero global model, generated one at a time (the bench itself holds
// one update and the global model, 2 x d floats, besides the strategy).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <sys/resource.h>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "server/federation/aggregate.hpp"
#include "server/federation/strategy_config.hpp"
#include "shared/util/rng.hpp"

namespace {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fedcore;
  CLI::App app("robust aggregation at scale");
  federation::StrategyConfig config;
  config.name = "median";
  std::size_t clients = 100;
  std::size_t params = 10'000'000;
  std::size_t budget_mb = 512;
  std::string scratch = std::filesystem::temp_directory_path().string();
  app.add_option("--rule", config.name,
                 "median | trimmed_mean | krum | multi_krum | bulyan | "
                 "centered_clipping")
      ->capture_default_str();
  app.add_option("--clients", clients)->capture_default_str();
  app.add_option("--params", params)->capture_default_str();
  app.add_option("--budget-mb", budget_mb)->capture_default_str();
  app.add_option("--scratch", scratch, "where the scratch file goes")->capture_default_str();
  app.add_option("--byzantine", config.byzantine)->capture_default_str();
  app.add_option("--iterations", config.clipping_iterations, "centered clipping's L")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  config.memory_budget_bytes = budget_mb << 20;
  config.scratch_dir = scratch;
  config.trim_fraction = 0.1;

  auto strategy = federation::make_strategy(config, params);
  if (!strategy) {
    std::fprintf(stderr, "robust_aggregation_bench: %s\n", strategy.error().message.c_str());
    return 2;
  }
  const std::vector<float> global(params, 0.0f);
  std::vector<float> update(params);
  const double rss_before = peak_rss_mib();
  (*strategy)->begin_round(global, clients);
  Rng rng(1);
  double generating = 0;
  const auto adding = std::chrono::steady_clock::now();
  for (std::size_t c = 0; c < clients; ++c) {
    const auto drawing = std::chrono::steady_clock::now();
    for (auto& v : update) {
      v = static_cast<float>(0.01 * rng.normal());
    }
    generating += seconds_since(drawing);
    (*strategy)->add_update(update, 1);
  }
  const double add_seconds = seconds_since(adding) - generating;
  if (auto refused = (*strategy)->refuse_finish()) {
    std::fprintf(stderr, "robust_aggregation_bench: the round cannot finish: %s\n",
                 refused->c_str());
    return 1;
  }
  const auto aggregating = std::chrono::steady_clock::now();
  const auto next = (*strategy)->finish_round();
  const double aggregate_seconds = seconds_since(aggregating);
  double norm = 0;
  for (float v : next) {
    norm += static_cast<double>(v) * v;
  }
  const nlohmann::json out{{"rule", config.name},
                           {"clients", clients},
                           {"params", params},
                           {"budget_mib", budget_mb},
                           {"updates_gib", static_cast<double>(clients * params * 4) / (1 << 30)},
                           {"add_seconds", add_seconds},
                           {"aggregate_seconds", aggregate_seconds},
                           {"peak_rss_mib_before", rss_before},
                           {"peak_rss_mib", peak_rss_mib()},
                           {"result_norm", std::sqrt(norm)}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
