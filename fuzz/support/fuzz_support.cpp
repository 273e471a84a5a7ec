#include "fuzz/support/fuzz_support.hpp"

#include <cstdio>
#include <cstdlib>
#include <sys/mman.h>
#include <unistd.h>

namespace fedcore::fuzz {

MemFile::MemFile(std::span<const std::byte> bytes) {
  fd_ = memfd_create("fedcore-fuzz", MFD_CLOEXEC);
  if (fd_ < 0) {
    invariant_failed("MemFile", "memfd_create failed");
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const auto n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      invariant_failed("MemFile", "write to the memfd failed");
    }
    done += static_cast<std::size_t>(n);
  }
  path_ = "/proc/self/fd/" + std::to_string(fd_);
}

MemFile::~MemFile() {
  ::close(fd_);
}

void invariant_failed(std::string_view target, std::string_view what) {
  std::fprintf(stderr, "fuzz %.*s: invariant failed: %.*s\n", static_cast<int>(target.size()),
               target.data(), static_cast<int>(what.size()), what.data());
  std::abort();
}

}  // namespace fedcore::fuzz
