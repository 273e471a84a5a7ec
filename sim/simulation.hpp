// One fedcore-sim invocation from validated options to the files in the output folder:
// load and partition the data, run the federation (unless baseline_only), run the
// centralized baseline (when asked), then write rounds.csv, baseline.csv, summary.json
// and the plots, and print the summary.
#pragma once

#include "shared/util/error.hpp"
#include "sim/options.hpp"
#include "sim/progress.hpp"

namespace fedcore::sim {

struct SimulationOutcome {
  std::string summary_path;
  double final_accuracy = 0;           // federated (or baseline when baseline_only)
  double baseline_final_accuracy = 0;  // 0 without a baseline
};

// Errors: those of data loading, the federation's setup and writing the outputs. A run
// that ends paused or failed still writes its outputs and is reported in summary.json.
result<SimulationOutcome> run_simulation(const SimOptions& options, Progress& progress);

// Raises the soft RLIMIT_NOFILE to the hard limit (thousands of simulated clients need
// two sockets each). Returns the soft limit now in force.
std::uint64_t raise_open_file_limit() noexcept;

}  // namespace fedcore::sim
