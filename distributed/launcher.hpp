// The fedcore-dist launcher (`fedcore-dist launch --nproc N -- <job options>`), like
// torchrun: starts N local worker processes of this executable, with a fresh rendezvous
// port per attempt, and watches them.
//
// When every worker exits 0, the job succeeded. When one fails (non-zero exit or a
// signal), the others notice on their own within the operation deadline (their
// collectives fail) — but the launcher does not wait for that: it stops them (SIGTERM,
// then SIGKILL after `stop_grace`) and, while restarts remain, starts all N again; the
// job resumes from its last checkpoint when the job options name a checkpoint folder.
// Workers get PR_SET_PDEATHSIG, so they die with the launcher.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace fedcore::distributed {

// How the launcher places workers on CPUs. `automatic` (the default) gives each rank its
// own equal block of the CPUs the launcher may use, when there are at least as many CPUs
// as ranks (OpenMPI binds the same way by default): lockstep ranks then keep their caches
// and never queue behind each other on one core. Every thread a worker starts inherits
// its block, so --threads above the block size share it. With more ranks than CPUs, or
// `none`, workers float wherever the kernel puts them.
enum class CpuBinding { automatic, none };

struct LaunchOptions {
  int nproc = 1;
  CpuBinding binding = CpuBinding::automatic;
  int max_restarts = 0;
  std::string executable;                // this program (/proc/self/exe)
  std::vector<std::string> worker_args;  // job options passed to every worker
  std::string host = "127.0.0.1";        // rendezvous host
  std::chrono::milliseconds stop_grace{std::chrono::seconds(5)};
};

// Returns the process exit status: 0 success; otherwise the failing worker's code (or
// 128 + signal), after the last allowed attempt.
int launch(const LaunchOptions& options);

// The CPUs each of `nproc` ranks is bound to under `binding`, drawn from `allowed` (the
// launcher's own affinity, in order); an empty list means "not bound".
std::vector<std::vector<int>> cpu_blocks(int nproc, CpuBinding binding,
                                         const std::vector<int>& allowed);

// Binds the calling process (every thread it starts later inherits it) to `cpus`, one
// block of cpu_blocks(); an empty list leaves it unbound. False (errno set) when the
// kernel refuses.
bool bind_to_cpus(const std::vector<int>& cpus);

// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus();

// A free TCP port on `host` (bound and released; another process may take it first).
int pick_free_port(const std::string& host);

}  // namespace fedcore::distributed
