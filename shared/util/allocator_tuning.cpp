#include "shared/util/allocator_tuning.hpp"

#include <malloc.h>

namespace fedcore {

bool keep_large_buffers_warm() noexcept {
  // 32 MiB is the largest mmap threshold glibc accepts on 64-bit (HEAP_MAX_SIZE / 2).
  constexpr int kMmapThreshold = 32 << 20;
  constexpr int kTrimThreshold = 512 << 20;
  const bool mmap_ok = ::mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1;
  const bool trim_ok = ::mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  return mmap_ok && trim_ok;
}

}  // namespace fedcore
