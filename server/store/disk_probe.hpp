// Disk probes: can a directory take a write now, and how much room is left. The server
// asks before it resumes a run that a full or read-only disk paused (docs/operations.md,
// "Disk full and read-only storage"), and reports the figures in its log.
//
// A probe writes nothing anyone could read: it allocates an unnamed file (O_TMPFILE)
// that vanishes when closed, even if the process dies in between. On a file system
// without O_TMPFILE it uses "<dir>/.fedcore-probe" and removes it; a crash at that moment
// leaves that one file, overwritten by the next probe.
//
// Thread safety: stateless; the functions may be called from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "shared/util/error.hpp"

namespace fedcore::store {

// Allocates `bytes` in a new file in `dir` (fallocate, or written zeros where the file
// system cannot allocate), syncs it and removes it. Success means the directory took a
// durable write of that size at this moment (a real write: quotas and root-reserved
// blocks count as they will for the next write).
// Errors, by what the operating system said:
//   resource_exhausted  ENOSPC, EDQUOT: no room for `bytes`
//   permission_denied   EROFS, EACCES, EPERM: the directory cannot be written
//   not_found           ENOENT, ENOTDIR: no such directory
//   io_error            anything else (EIO, ...)
// The message names the directory and the system's own words, e.g.
//   "cannot allocate 1048576 bytes in '/var/lib/fedcore': No space left on device".
[[nodiscard]] result<void> probe_directory(const std::string& dir, std::uint64_t bytes);

// What statvfs says of the file system holding `path` (a file or a directory).
struct DiskSpace {
  std::uint64_t available_bytes = 0;  // for an unprivileged writer (f_bavail)
  std::uint64_t total_bytes = 0;
  bool read_only = false;  // mounted read-only (ST_RDONLY)
};
// Errors: not_found (no such path), io_error.
[[nodiscard]] result<DiskSpace> disk_space(const std::string& path);

// The errc a storage failure of the operating system maps to, as in probe_directory's
// table (0 is io_error).
[[nodiscard]] errc errc_from_errno(int system_errno) noexcept;

}  // namespace fedcore::store
