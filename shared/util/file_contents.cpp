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

// The calling thread's bounce buffer, or null when it cannot be had. Kept, not freed after
// each file: a checkpoint writer writes one file a round, and a fresh 4 MiB buffer is a
// fresh mapping whose 1,024 pages fault in and are zeroed on the first copy into them
// (6% of the server's CPU at 1M parameters x 2 clients, docs/results.md).
void* thread_bounce_buffer() {
  thread_local std::unique_ptr<void, FreeDeleter> buffer = [] {
    void* raw = nullptr;
    return std::unique_ptr<void, FreeDeleter>(posix_memalign(&raw, kAlign, kChunk) == 0 ? raw
                                                                                        : nullptr);
  }();
  return buffer.get();
}

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

// Reads the parts in order, as one stream of bytes.
class PartsCursor {
 public:
  explicit PartsCursor(ByteParts parts) : parts_(parts) {}
  // Copies the next `n` bytes to `out`. REQUIRES: at least `n` bytes are left.
  void copy(std::byte* out, std::size_t n) noexcept {
    while (n > 0) {
      const auto part = parts_[index_];
      const std::size_t take = std::min(n, part.size() - offset_);
      if (take > 0) {  // an empty part has no data pointer to copy from
        std::memcpy(out, part.data() + offset_, take);
      }
      out += take;
      n -= take;
      advance(take);
    }
  }
  // Writes everything left, as it lies.
  result<void> write_rest(int fd, const std::string& path) {
    for (; index_ < parts_.size(); ++index_, offset_ = 0) {
      const auto part = parts_[index_];
      if (auto done = write_buffered(fd, part.data() + offset_, part.size() - offset_, path);
          !done) {
        return done;
      }
    }
    return {};
  }

 private:
  void advance(std::size_t n) noexcept {
    offset_ += n;
    while (index_ < parts_.size() && offset_ == parts_[index_].size()) {
      ++index_;
      offset_ = 0;
    }
  }

  ByteParts parts_;
  std::size_t index_ = 0;
  std::size_t offset_ = 0;
};

// The whole file the plain way: small files, and file systems without direct I/O.
result<WritePath> write_all_buffered(int fd, ByteParts parts, const std::string& path) {
  auto done = PartsCursor(parts).write_rest(fd, path);
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
  const std::span<const std::byte> one[] = {bytes};
  return write_new_file_contents(fd, ByteParts(one), path);
}

result<WritePath> write_new_file_contents(int fd, ByteParts parts, const std::string& path) {
  std::size_t size = 0;
  for (const auto& part : parts) {
    size += part.size();
  }
  const std::size_t whole = size / kAlign * kAlign;
  void* const bounce = size < kDirectWriteMinBytes ? nullptr : thread_bounce_buffer();
  if (bounce == nullptr) {
    return write_all_buffered(fd, parts, path);
  }
  // F_SETFL refuses O_DIRECT on a file system without direct I/O.
  if (!set_direct(fd, true)) {
    return write_all_buffered(fd, parts, path);
  }
  PartsCursor cursor(parts);
  std::size_t offset = 0;
  // What a short write left unwritten in the bounce buffer: from `staged_from`, `staged`
  // bytes.
  std::size_t staged_from = 0;
  std::size_t staged = 0;
  while (offset < whole) {
    const std::size_t chunk = std::min(kChunk, whole - offset);
    cursor.copy(static_cast<std::byte*>(bounce), chunk);
    ssize_t n = -1;
    do {
      n = ::write(fd, bounce, chunk);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EINVAL && offset == 0) {
      // Some file systems accept the flag and refuse the request: write it all plainly.
      if (!set_direct(fd, false)) {
        return write_error(path);
      }
      return write_all_buffered(fd, parts, path);
    }
    if (n < 0) {
      const int saved = errno;
      set_direct(fd, false);
      errno = saved;
      return write_error(path);
    }
    offset += static_cast<std::size_t>(n);
    staged_from = static_cast<std::size_t>(n);
    staged = chunk - staged_from;
    if (staged > 0) {
      break;  // a short write leaves an unaligned offset: the rest goes buffered
    }
  }
  if (!set_direct(fd, false)) {
    return write_error(path);
  }
  // What a short write left of the staged chunk, then the parts not yet copied.
  if (auto done =
          write_buffered(fd, static_cast<const std::byte*>(bounce) + staged_from, staged, path);
      !done) {
    return done.error();
  }
  auto done = cursor.write_rest(fd, path);
  return done ? result<WritePath>(WritePath::direct) : done.error();
}

}  // namespace fedcore
