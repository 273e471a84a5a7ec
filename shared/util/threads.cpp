#include "shared/util/threads.hpp"

#include <omp.h>
#include <sched.h>
#include <thread>
#include <unistd.h>

namespace fedcore {

void set_compute_threads(int n) noexcept {
  omp_set_num_threads(n > 0 ? n : hardware_threads());
}

int compute_threads() noexcept {
  return omp_get_max_threads();
}

int hardware_threads() noexcept {
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

int usable_cpus() noexcept {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) {
    return online_cpus();
  }
  const int n = CPU_COUNT(&mask);
  return n > 0 ? n : 1;
}

int online_cpus() noexcept {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace fedcore
