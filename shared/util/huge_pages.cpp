#include "shared/util/huge_pages.hpp"

#include <cstdint>
#include <sys/mman.h>

namespace fedcore {

void advise_huge_pages(void* data, std::size_t bytes) noexcept {
  if (data == nullptr || bytes < kHugePageAdviceMinBytes) {
    return;
  }
  // madvise wants a page-aligned start; only whole 2 MiB pages inside the range can be
  // huge, so the range is trimmed to them (the buffer's first and last bytes stay small).
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  const std::uintptr_t last = (begin + bytes) & ~(kHuge - 1);
  if (last <= first) {
    return;
  }
  (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

}  // namespace fedcore
