#include "shared/util/huge_pages.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/mman.h>

#include <gtest/gtest.h>

namespace fedcore {
namespace {

// The VmFlags of the mapping that holds `address` in /proc/self/smaps ("" if none).
std::string vm_flags_at(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t from = 0, to = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> from >> dash >> to && dash == '-') {
      inside = from <= at && at < to;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// The advice marks the whole 2 MiB pages inside the buffer, and only them: a mapping split
// at the first huge-page boundary carries "hg"; the small head before it does not.
TEST(HugePages, TheWholeHugePagesInsideALargeBufferAreAdvised) {
  constexpr std::size_t kBytes = std::size_t{24} << 20;
  void* map = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  // Start the buffer 4 KiB past a 2 MiB boundary, as malloc's mapped chunks do (a header).
  const auto base = reinterpret_cast<std::uintptr_t>(map);
  const std::uintptr_t boundary =
      (base + (std::uintptr_t{2} << 20) - 1) & ~((std::uintptr_t{2} << 20) - 1);
  auto* buffer = reinterpret_cast<std::byte*>(boundary + 4096);
  const std::size_t size = std::size_t{16} << 20;
  // A kernel without transparent huge pages refuses the advice itself (EINVAL).
  void* probe = ::mmap(nullptr, std::size_t{4} << 20, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  const bool supported = ::madvise(probe, std::size_t{4} << 20, MADV_HUGEPAGE) == 0;
  ::munmap(probe, std::size_t{4} << 20);
  if (!supported) {
    ::munmap(map, kBytes);
    GTEST_SKIP() << "this kernel has no transparent huge pages";
  }
  advise_huge_pages(buffer, size);
  const auto first_whole = reinterpret_cast<const std::byte*>(boundary + (std::uintptr_t{2} << 20));
  EXPECT_NE(vm_flags_at(first_whole).find(" hg"), std::string::npos) << vm_flags_at(first_whole);
  EXPECT_EQ(vm_flags_at(buffer).find(" hg"), std::string::npos) << vm_flags_at(buffer);
  std::memset(buffer, 0x5a, size);  // still ordinary memory
  EXPECT_EQ(buffer[size - 1], std::byte{0x5a});
  ::munmap(map, kBytes);
}

TEST(HugePages, SmallOrMissingBuffersAreLeftAlone) {
  advise_huge_pages(nullptr, std::size_t{64} << 20);  // no buffer: nothing to do
  char small[4096] = {};
  advise_huge_pages(small, sizeof small);
  EXPECT_EQ(vm_flags_at(small).find(" hg"), std::string::npos);
}

}  // namespace
}  // namespace fedcore
