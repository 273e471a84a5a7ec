#include "server/store/disk_probe.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace fedcore::store {
namespace {

error os_failure(int system_errno, const std::string& what) {
  return fail(errc_from_errno(system_errno), what + ": " + std::strerror(system_errno));
}

// Writes `bytes` zeros, for file systems that cannot allocate without writing.
int write_zeros(int fd, std::uint64_t bytes) {
  static constexpr std::array<char, 64 * 1024> kZeros{};
  while (bytes > 0) {
    const auto chunk = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, kZeros.size()));
    const ssize_t n = ::write(fd, kZeros.data(), chunk);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno;
    }
    bytes -= static_cast<std::uint64_t>(n);
  }
  return 0;
}

}  // namespace

errc errc_from_errno(int system_errno) noexcept {
  switch (system_errno) {
    case ENOSPC:
    case EDQUOT:
      return errc::resource_exhausted;
    case EROFS:
    case EACCES:
    case EPERM:
      return errc::permission_denied;
    case ENOENT:
    case ENOTDIR:
      return errc::not_found;
    default:
      return errc::io_error;
  }
}

result<void> probe_directory(const std::string& dir, std::uint64_t bytes) {
  std::string named;  // set when the file has a name to remove
  int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // Older kernels answer O_TMPFILE with EISDIR, file systems without it EOPNOTSUPP.
    named = dir + "/.fedcore-probe";
    fd = ::open(named.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  }
  if (fd < 0) {
    return os_failure(errno, "cannot create a file in '" + dir + "'");
  }
  int failed = 0;
  if (bytes > 0 && ::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) != 0) {
    failed = errno == EOPNOTSUPP ? write_zeros(fd, bytes) : errno;
  }
  if (failed == 0 && ::fsync(fd) != 0) {
    failed = errno;
  }
  if (::close(fd) != 0 && failed == 0) {
    failed = errno;
  }
  if (!named.empty()) {
    ::unlink(named.c_str());
  }
  if (failed != 0) {
    return os_failure(failed,
                      "cannot allocate " + std::to_string(bytes) + " bytes in '" + dir + "'");
  }
  return {};
}

result<DiskSpace> disk_space(const std::string& path) {
  struct statvfs s {};
  if (::statvfs(path.c_str(), &s) != 0) {
    return os_failure(errno, "cannot read the file system of '" + path + "'");
  }
  DiskSpace out;
  out.available_bytes = static_cast<std::uint64_t>(s.f_bavail) * s.f_frsize;
  out.total_bytes = static_cast<std::uint64_t>(s.f_blocks) * s.f_frsize;
  out.read_only = (s.f_flag & ST_RDONLY) != 0;
  return out;
}

}  // namespace fedcore::store
