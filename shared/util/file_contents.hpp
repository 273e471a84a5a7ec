// Writing a large new file without passing it through the page cache.
//
// Why: every committed round writes its checkpoint to a file of its own, and the files
// stay (the history can serve any round's model). A buffered write of a new 40 MB file
// had the kernel allocate and fill 10,000 fresh page-cache pages: 96-118 ms on the
// project's VM, then 13-16 ms of fsync. Written with O_DIRECT from an aligned buffer the
// same file took 20 ms, fsync included (docs/results.md, "The checkpoint write").
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "shared/util/error.hpp"

namespace fedcore {

// Files at least this large go around the page cache where the file system allows it.
inline constexpr std::size_t kDirectWriteMinBytes = std::size_t{1} << 20;

// A file's contents as consecutive pieces, written one after the other (a header, a
// model's parameters where they lie, a checksum): no copy of the whole is made.
using ByteParts = std::span<const std::span<const std::byte>>;

// How write_new_file_contents wrote the bulk of the file.
enum class WritePath { buffered, direct };

// Writes `bytes` at the start of `fd`, a newly created empty file open for writing. Files
// of kDirectWriteMinBytes and more are written with O_DIRECT through an aligned buffer,
// except the last partial block; a file system without direct I/O (tmpfs, some FUSE) gets
// a plain write instead. The aligned buffer (4 MiB) is the calling thread's, made on its
// first direct write and kept until the thread ends. Does not fsync: the caller does, which also
// makes the tail durable. Errors: io_error "cannot write '<path>': <the system's words>" (ENOSPC,
// EIO, EROFS, ...), after which the file's contents are unspecified.
result<WritePath> write_new_file_contents(int fd, ByteParts parts, const std::string& path);
result<WritePath> write_new_file_contents(int fd, std::span<const std::byte> bytes,
                                          const std::string& path);

}  // namespace fedcore
