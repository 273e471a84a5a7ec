#include "shared/util/file_contents.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <unistd.h>

namespace fedcore {
namespace {

// O_DIRECT wants the buffer's address, the length and the file offset aligned to the
// device's logical block (512 or 4096 bytes); 4096 satisfies both.
constexpr std::size_t kAlign = 4096;
// The bounce buffer: large enough that each write is one big request, small enough to
// stay in the cache the copy into it just warmed.
constexpr std::size_t kChunk = std::size_t{4} << 20;

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

error write_error(const std::string& path) {
  return fail(errc::io_error, "cannot write '" + path + "': " + std::strerror(errno));
}

result<void> write_buffered(int fd, const std::byte* data, std::size_t size,
                            const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return write_error(path);
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return {};
}

// The whole file the plain way: small files, and file systems without direct I/O.
result<WritePath> write_all_buffered(int fd, std::span<const std::byte> bytes,
                                     const std::string& path) {
  auto done = write_buffered(fd, bytes.data(), bytes.size(), path);
  return done ? result<WritePath>(WritePath::buffered) : done.error();
}

bool set_direct(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) {
    return false;
  }
  return ::fcntl(fd, F_SETFL, on ? (flags | O_DIRECT) : (flags & ~O_DIRECT)) == 0;
}

}  // namespace

result<WritePath> write_new_file_contents(int fd, std::span<const std::byte> bytes,
                                          const std::string& path) {
  const std::size_t whole = bytes.size() / kAlign * kAlign;
  void* raw = nullptr;
  if (bytes.size() < kDirectWriteMinBytes || posix_memalign(&raw, kAlign, kChunk) != 0) {
    return write_all_buffered(fd, bytes, path);
  }
  const std::unique_ptr<void, FreeDeleter> bounce(raw);
  // F_SETFL refuses O_DIRECT on a file system without direct I/O.
  if (!set_direct(fd, true)) {
    return write_all_buffered(fd, bytes, path);
  }
  std::size_t offset = 0;
  while (offset < whole) {
    const std::size_t chunk = std::min(kChunk, whole - offset);
    std::memcpy(bounce.get(), bytes.data() + offset, chunk);
    const ssize_t n = ::write(fd, bounce.get(), chunk);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno == EINVAL && offset == 0) {
      // Some file systems accept the flag and refuse the request: write it all plainly.
      if (!set_direct(fd, false)) {
        return write_error(path);
      }
      return write_all_buffered(fd, bytes, path);
    }
    if (n < 0) {
      const int saved = errno;
      set_direct(fd, false);
      errno = saved;
      return write_error(path);
    }
    offset += static_cast<std::size_t>(n);
    if (static_cast<std::size_t>(n) < chunk) {
      break;  // a short write leaves an unaligned offset: the rest goes buffered
    }
  }
  if (!set_direct(fd, false)) {
    return write_error(path);
  }
  auto done = write_buffered(fd, bytes.data() + offset, bytes.size() - offset, path);
  return done ? result<WritePath>(WritePath::direct) : done.error();
}

}  // namespace fedcore
