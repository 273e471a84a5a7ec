// File systems of a test's own, to run out of space or go read-only for real: a tmpfs of
// a fixed size, a read-only bind mount, an ext4 image on a loop device that the kernel
// remounts read-only after an error. All of it lives in a private mount namespace, so
// nothing is visible outside the test process and everything vanishes with it.
//
// Privilege. As root, enter_mount_namespace() is unshare(CLONE_NEWNS). Without root it
// also makes a user namespace in which the caller is root, which is enough for tmpfs and
// bind mounts wherever the kernel allows unprivileged user namespaces; loop devices
// (ext4 images) need real root. REQUIRE_MOUNTS turns a missing privilege into a skip only
// when the test runs without root and the CI variable is unset (a developer's machine);
// in CI, or as root, it is a failure with the reason, never a silent skip.
//
// unshare() refuses a process with more than one thread: enter the namespace first thing
// in the test, before anything starts a thread. ctest runs each test case in a process
// of its own; a binary run whole enters one nested namespace per test, which is allowed.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sched.h>
#include <string>
#include <sys/mount.h>
#include <unistd.h>
#include <utility>

#include <gtest/gtest.h>

#include "shared/util/error.hpp"

namespace fedcore::testing {

inline std::string os_words(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// Root of the machine, not root of a user namespace an earlier test of the same process
// entered (where uid 0 maps to someone else, and loop devices stay out of reach).
inline bool real_root() {
  std::ifstream map("/proc/self/uid_map");
  std::string inside, outside, count;
  map >> inside >> outside >> count;
  return ::geteuid() == 0 && inside == "0" && outside == "0" && count == "4294967295";
}

inline bool may_skip_privileged_tests() {
  return !real_root() && std::getenv("CI") == nullptr;
}

// Skips (developer machine without root) or fails (CI, or root) when `ok` is an error.
#define FEDCORE_REQUIRE_MOUNTS(ok)                                                     \
  do {                                                                                 \
    if (auto require_mounts_ = (ok); !require_mounts_) {                               \
      if (::fedcore::testing::may_skip_privileged_tests()) {                           \
        GTEST_SKIP() << "needs a private mount namespace (root, or unprivileged user " \
                        "namespaces): "                                                \
                     << require_mounts_.error().message;                               \
      }                                                                                \
      FAIL() << "cannot get a private mount namespace (CI runs these tests as root): " \
             << require_mounts_.error().message;                                       \
    }                                                                                  \
  } while (false)

inline result<void> write_proc(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  if (!out) {
    return fail(errc::permission_denied, "cannot write " + path);
  }
  return {};
}

// A private mount namespace for this process (see the file comment).
inline result<void> enter_mount_namespace() {
  if (::geteuid() == 0) {
    if (::unshare(CLONE_NEWNS) != 0) {
      return fail(errc::permission_denied, os_words("unshare(CLONE_NEWNS)"));
    }
  } else {
    const auto uid = ::geteuid();
    const auto gid = ::getegid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      return fail(errc::permission_denied, os_words("unshare(CLONE_NEWUSER | CLONE_NEWNS)"));
    }
    for (auto ok : {write_proc("/proc/self/setgroups", "deny"),
                    write_proc("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1"),
                    write_proc("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1")}) {
      if (!ok) {
        return ok;
      }
    }
  }
  // Mounts made from here on must not propagate to the namespace we came from.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return fail(errc::permission_denied, os_words("making / private"));
  }
  return {};
}

// A mount point, unmounted when the object goes (declare it after the TempDir that holds
// the directory, so that it goes first).
class Mount {
 public:
  Mount() = default;
  explicit Mount(std::string dir) : dir_(std::move(dir)) {}
  Mount(Mount&& other) noexcept : dir_(std::exchange(other.dir_, {})) {}
  Mount& operator=(Mount&& other) noexcept {
    std::swap(dir_, other.dir_);
    return *this;
  }
  ~Mount() { (void)unmount(); }  // nothing to report to in a destructor

  result<void> unmount() {
    if (dir_.empty()) {
      return {};
    }
    if (::umount2(dir_.c_str(), 0) != 0) {
      return fail(errc::io_error, os_words("umount " + dir_));
    }
    dir_.clear();
    return {};
  }
  const std::string& dir() const noexcept { return dir_; }

 private:
  std::string dir_;
};

// A tmpfs of `bytes` (rounded up to pages) on the existing directory `dir`.
inline result<Mount> mount_tmpfs(const std::string& dir, std::uint64_t bytes) {
  const auto options = "size=" + std::to_string(bytes) + ",mode=0755";
  if (::mount("fedcore-test", dir.c_str(), "tmpfs", 0, options.c_str()) != 0) {
    return fail(errc::permission_denied, os_words("mount tmpfs on " + dir));
  }
  return Mount(dir);
}

// `dir` mounted over itself, read-only: writes below it fail with EROFS until unmounted.
inline result<Mount> bind_read_only(const std::string& dir) {
  if (::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return fail(errc::permission_denied, os_words("bind mount " + dir));
  }
  Mount mounted(dir);
  if (::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
    return fail(errc::permission_denied, os_words("remount " + dir + " read-only"));
  }
  return mounted;
}

// Fills the file system of `dir` with "<dir>/<name>" until it refuses (ENOSPC); returns
// the bytes written. Bounded by `limit`.
inline result<std::uint64_t> fill_disk(const std::string& dir, const std::string& name = "filler",
                                       std::uint64_t limit = std::uint64_t{1} << 30) {
  const auto path = dir + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    return fail(errc::io_error, os_words("open " + path));
  }
  static const std::string kChunk(4096, 'x');
  std::uint64_t written = 0;
  int last_errno = 0;
  while (written < limit) {
    const ssize_t n = ::write(fd, kChunk.data(), kChunk.size());
    if (n <= 0) {
      last_errno = n < 0 ? errno : ENOSPC;
      break;
    }
    written += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  if (last_errno != ENOSPC) {
    errno = last_errno;
    return fail(errc::io_error, last_errno == 0 ? "the disk did not fill within the limit"
                                                : os_words("write " + path));
  }
  return written;
}

// Runs a shell command line built by the test from fixed words and its own paths; true
// when it exits with 0. Output goes to the test's log.
inline bool run_command(const std::string& line) {
  return std::system(line.c_str()) == 0;  // NOLINT(cert-env33-c): a test's own tool call
}

}  // namespace fedcore::testing
