#include "shared/util/cpu_time.hpp"

#include <sys/resource.h>

namespace fedcore {

CpuTimes process_cpu_times() noexcept {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) {
    return {};  // cannot fail for RUSAGE_SELF with a valid pointer; zeros read as "no data"
  }
  const auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return {seconds(usage.ru_utime), seconds(usage.ru_stime)};
}

}  // namespace fedcore
