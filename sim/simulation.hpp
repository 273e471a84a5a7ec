// One fedcore-sim invocation from validated options to the files in the output folder:
// load and partition the data, run the federation (unless baseline_only), run the
// centralized baseline (when asked), then write rounds.csv, baseline.csv, summary.json
// and the plots, and print the summary.
#pragma once

#include "shared/util/error.hpp"
#include "sim/cluster.hpp"
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
// The same as one rank of a simulation across processes (sim/cluster.hpp): rank 0 as
// above; every other rank loads the data, runs its share of the sites until the run ends,
// and writes nothing (summary_path stays empty).
result<SimulationOutcome> run_simulation(const SimOptions& options, Progress& progress,
                                         Cluster& cluster);

// The open files one process (one rank) of a simulation of `clients` sites needs: room for
// the data, the history and the dashboard, and over TLS two sockets per site (its own
// sites' ends, and on rank 0 the server's end of every site's connection). In-process
// sites use memory links, no descriptor at all.
std::uint64_t open_files_needed(std::size_t clients, Transport transport,
                                const Cluster& cluster) noexcept;

}  // namespace fedcore::sim
