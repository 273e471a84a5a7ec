// Compute-thread control for the Eigen kernels.
//
// Eigen parallelises large GEMMs with OpenMP. `set_compute_threads(n)` sets the OpenMP
// thread budget **of the calling thread only** (the OpenMP ICV is per thread), so a
// centralized trainer can use every core while each simulated client thread uses one,
// in the same process. n = 0 means "all hardware threads".
#pragma once

namespace fedcore {

void set_compute_threads(int n) noexcept;
int compute_threads() noexcept;
int hardware_threads() noexcept;
// The CPUs this process may run on (its affinity mask: taskset, cgroups' cpusets), at
// least 1; online_cpus() when the mask cannot be read.
int usable_cpus() noexcept;
// The machine's online CPUs, whatever this process's mask (at least 1).
int online_cpus() noexcept;

}  // namespace fedcore
