// fedcore-sim: a simulated federation in one process (the real server and N real client
// daemons), with reports and plots. See docs/sim.md.
//
// --log-format text|json is taken here, before the simulation's own options are parsed
// (sim/options.hpp): it decides only how the server's and clients' log lines look
// (shared/util/log_format.hpp; component "sim"), not what is simulated.
#include <cstdio>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include <spdlog/spdlog.h>

#include "shared/util/allocator_tuning.hpp"
#include "shared/util/log_format.hpp"
#include "sim/cluster.hpp"
#include "sim/options.hpp"
#include "sim/progress.hpp"
#include "sim/simulation.hpp"

#ifdef FEDCORE_SIM_MPI
#include <mpi.h>

#include "sim/mpi_cluster.hpp"
#endif

namespace {

constexpr const char* kLogFormatHelp =
    "\nLogging:\n  --log-format text|json   how log lines (--verbose) look; json: one JSON "
    "object per line\n";

}  // namespace

int main(int argc, char** argv) {
  fedcore::keep_large_buffers_warm();  // model-sized buffers: no page faults per round
  using namespace fedcore::sim;
  std::vector<std::string> args(argv + 1, argv + argc);
  auto log_format = fedcore::take_log_format_flag(args);
  if (!log_format) {
    std::fprintf(stderr, "fedcore-sim: %s\nRun with --help for the options.\n",
                 log_format.error().message.c_str());
    return 2;
  }
  fedcore::install_log_format(log_format->value_or(fedcore::LogFormat::text),
                              {.component = "sim", .client = std::nullopt});
  auto line = parse_command_line(args);
  if (!line) {
    std::fprintf(stderr, "fedcore-sim: %s\nRun with --help for the options.\n",
                 line.error().message.c_str());
    return 2;
  }
  if (line->help) {
    std::fputs(line->help_text.c_str(), stdout);
    std::fputs(kLogFormatHelp, stdout);
    return 0;
  }
  const SimOptions& options = line->options;
  spdlog::set_level(options.verbose ? spdlog::level::info : spdlog::level::err);
  std::unique_ptr<Cluster> cluster;
  if (options.mpi) {
#ifdef FEDCORE_SIM_MPI
    // FUNNELED: only this thread calls MPI (sim/mpi_cluster.hpp).
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    cluster = mpi_world_cluster();
#else
    std::fprintf(stderr, "fedcore-sim: --mpi needs a build with MPI (-DFEDCORE_MPI=ON)\n");
    return 2;
#endif
  } else {
    cluster = single_process_cluster();
  }
  // The other ranks print nothing but their notes: rank 0 reports the run.
  const auto mode = cluster->rank() != 0 ? OutputMode::quiet
                    : options.jsonl      ? OutputMode::jsonl
                    : options.quiet      ? OutputMode::quiet
                                         : OutputMode::normal;
  Progress progress(mode, stdout, isatty(STDOUT_FILENO) != 0);
  int code = 0;
  try {
    auto outcome = run_simulation(options, progress, *cluster);
    if (!outcome) {
      spdlog::error("fedcore-sim: {}", outcome.error().to_string());
      code = 1;
    }
  } catch (const std::exception& e) {
    // Caught once here: anything thrown is a fault, not an expected failure.
    spdlog::error("fedcore-sim: unexpected failure: {}", e.what());
    code = 1;
  }
  cluster.reset();
#ifdef FEDCORE_SIM_MPI
  if (options.mpi) {
    if (code != 0) {
      // The other ranks may wait for this one at a meeting point: end the whole job.
      MPI_Abort(MPI_COMM_WORLD, code);
    }
    MPI_Finalize();
  }
#endif
  return code;
}
