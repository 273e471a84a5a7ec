// FaultVfs: an SQLite VFS for tests that refuses writes on demand, as the disk would (the
// idea of LevelDB's ErrorEnv, at SQLite's own seam). It wraps the default VFS; while armed,
// every write (or every sync) of every file answers the armed result code — SQLITE_FULL
// for a full disk, SQLITE_IOERR_WRITE for a read-only or failing one — and writes nothing.
// Reads are never touched, so a store keeps answering queries.
//
// Constructing one makes it the default VFS for connections opened afterwards (open the
// store after it); the destructor restores the previous default, so the FaultVfs must
// outlive every connection opened through it. At most one exists at a time.
//
// Thread safety: arm/heal from the thread that uses the connections.
#pragma once

#include <cstdint>

struct sqlite3_vfs;

namespace fedcore::store::testing {

class FaultVfs {
 public:
  FaultVfs();
  ~FaultVfs();
  FaultVfs(const FaultVfs&) = delete;
  FaultVfs& operator=(const FaultVfs&) = delete;

  // Every xWrite and xTruncate answers `sqlite_code` from now on; with `count` >= 1 only
  // the next `count` of them.
  void fail_writes(int sqlite_code, std::int64_t count = -1) noexcept {
    write_code_ = sqlite_code;
    writes_left_ = count;
  }
  // Every xSync answers `sqlite_code` from now on (the data may have reached the file).
  void fail_syncs(int sqlite_code) noexcept { sync_code_ = sqlite_code; }
  // Writes and syncs go through again.
  void heal() noexcept {
    write_code_ = 0;
    sync_code_ = 0;
  }
  // Calls refused so far.
  std::int64_t refused() const noexcept { return refused_; }
  // xSync calls so far (fsyncs asked of the disk), refused or not.
  std::int64_t syncs() const noexcept { return syncs_; }
  void count_sync() noexcept { ++syncs_; }

  // For the VFS's C callbacks (fault_vfs.cpp): the code the next write answers (0: it
  // goes through), counted as used.
  int take_write_refusal() noexcept {
    const int code = write_code_;
    if (code != 0 && writes_left_ > 0 && --writes_left_ == 0) {
      write_code_ = 0;
    }
    return code;
  }
  int sync_code() const noexcept { return sync_code_; }
  void count_refusal() noexcept { ++refused_; }
  sqlite3_vfs* base() const noexcept { return base_; }

 private:
  int write_code_ = 0;
  std::int64_t writes_left_ = -1;
  int sync_code_ = 0;
  std::int64_t refused_ = 0;
  std::int64_t syncs_ = 0;
  sqlite3_vfs* base_ = nullptr;
  sqlite3_vfs* vfs_ = nullptr;  // ours, registered as the default
};

}  // namespace fedcore::store::testing
