#include "tests/store/fault_vfs.hpp"

#include <cstring>
#include <memory>
#include <stdexcept>

#include <sqlite3.h>

namespace fedcore::store::testing {
namespace {

// Our file: SQLite allocates szOsFile bytes; the wrapped VFS's file follows our header.
struct FaultFile {
  sqlite3_file base;  // must come first: SQLite sees this
  FaultVfs* owner;
  sqlite3_file* real;
};

FaultVfs* owner_of(sqlite3_vfs* vfs) {
  return static_cast<FaultVfs*>(vfs->pAppData);
}
FaultFile* as_fault(sqlite3_file* f) {
  return reinterpret_cast<FaultFile*>(f);
}
sqlite3_file* real_of(sqlite3_file* f) {
  return as_fault(f)->real;
}

int refuse(FaultFile* f, int code) {
  f->owner->count_refusal();
  return code;
}

int x_close(sqlite3_file* f) {
  return real_of(f)->pMethods->xClose(real_of(f));
}
int x_read(sqlite3_file* f, void* out, int n, sqlite3_int64 offset) {
  return real_of(f)->pMethods->xRead(real_of(f), out, n, offset);
}
int x_write(sqlite3_file* f, const void* data, int n, sqlite3_int64 offset) {
  if (const int code = as_fault(f)->owner->take_write_refusal(); code != 0) {
    return refuse(as_fault(f), code);
  }
  return real_of(f)->pMethods->xWrite(real_of(f), data, n, offset);
}
int x_truncate(sqlite3_file* f, sqlite3_int64 size) {
  if (const int code = as_fault(f)->owner->take_write_refusal(); code != 0) {
    return refuse(as_fault(f), code);
  }
  return real_of(f)->pMethods->xTruncate(real_of(f), size);
}
int x_sync(sqlite3_file* f, int flags) {
  as_fault(f)->owner->count_sync();
  if (const int code = as_fault(f)->owner->sync_code(); code != 0) {
    return refuse(as_fault(f), code);
  }
  return real_of(f)->pMethods->xSync(real_of(f), flags);
}
int x_file_size(sqlite3_file* f, sqlite3_int64* size) {
  return real_of(f)->pMethods->xFileSize(real_of(f), size);
}
int x_lock(sqlite3_file* f, int level) {
  return real_of(f)->pMethods->xLock(real_of(f), level);
}
int x_unlock(sqlite3_file* f, int level) {
  return real_of(f)->pMethods->xUnlock(real_of(f), level);
}
int x_check_reserved_lock(sqlite3_file* f, int* out) {
  return real_of(f)->pMethods->xCheckReservedLock(real_of(f), out);
}
int x_file_control(sqlite3_file* f, int op, void* arg) {
  return real_of(f)->pMethods->xFileControl(real_of(f), op, arg);
}
int x_sector_size(sqlite3_file* f) {
  return real_of(f)->pMethods->xSectorSize(real_of(f));
}
int x_device_characteristics(sqlite3_file* f) {
  return real_of(f)->pMethods->xDeviceCharacteristics(real_of(f));
}
int x_shm_map(sqlite3_file* f, int region, int size, int extend, void volatile** out) {
  return real_of(f)->pMethods->xShmMap(real_of(f), region, size, extend, out);
}
int x_shm_lock(sqlite3_file* f, int offset, int n, int flags) {
  return real_of(f)->pMethods->xShmLock(real_of(f), offset, n, flags);
}
void x_shm_barrier(sqlite3_file* f) {
  real_of(f)->pMethods->xShmBarrier(real_of(f));
}
int x_shm_unmap(sqlite3_file* f, int delete_flag) {
  return real_of(f)->pMethods->xShmUnmap(real_of(f), delete_flag);
}
// No memory-mapped reads: every page then comes through x_read (and writes through
// x_write), whatever the build's mmap default.
int x_fetch(sqlite3_file*, sqlite3_int64, int, void** out) {
  *out = nullptr;
  return SQLITE_OK;
}
int x_unfetch(sqlite3_file*, sqlite3_int64, void*) {
  return SQLITE_OK;
}

const sqlite3_io_methods kMethods = {
    3,
    x_close,
    x_read,
    x_write,
    x_truncate,
    x_sync,
    x_file_size,
    x_lock,
    x_unlock,
    x_check_reserved_lock,
    x_file_control,
    x_sector_size,
    x_device_characteristics,
    x_shm_map,
    x_shm_lock,
    x_shm_barrier,
    x_shm_unmap,
    x_fetch,
    x_unfetch,
};

int x_open(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags) {
  auto* owner = owner_of(vfs);
  auto* f = as_fault(file);
  f->owner = owner;
  f->real = reinterpret_cast<sqlite3_file*>(f + 1);
  const int rc = owner->base()->xOpen(owner->base(), name, f->real, flags, out_flags);
  // SQLite calls xClose only when pMethods is set: set it only for an open file.
  f->base.pMethods = (rc == SQLITE_OK && f->real->pMethods != nullptr) ? &kMethods : nullptr;
  return rc;
}

// The rest of the VFS is the wrapped one's.
int x_delete(sqlite3_vfs* vfs, const char* name, int sync_dir) {
  auto* base = owner_of(vfs)->base();
  return base->xDelete(base, name, sync_dir);
}
int x_access(sqlite3_vfs* vfs, const char* name, int flags, int* out) {
  auto* base = owner_of(vfs)->base();
  return base->xAccess(base, name, flags, out);
}
int x_full_pathname(sqlite3_vfs* vfs, const char* name, int n, char* out) {
  auto* base = owner_of(vfs)->base();
  return base->xFullPathname(base, name, n, out);
}
int x_randomness(sqlite3_vfs* vfs, int n, char* out) {
  auto* base = owner_of(vfs)->base();
  return base->xRandomness(base, n, out);
}
int x_sleep(sqlite3_vfs* vfs, int microseconds) {
  auto* base = owner_of(vfs)->base();
  return base->xSleep(base, microseconds);
}
int x_current_time(sqlite3_vfs* vfs, double* out) {
  auto* base = owner_of(vfs)->base();
  return base->xCurrentTime(base, out);
}
int x_get_last_error(sqlite3_vfs* vfs, int n, char* out) {
  auto* base = owner_of(vfs)->base();
  return base->xGetLastError != nullptr ? base->xGetLastError(base, n, out) : 0;
}
int x_current_time_int64(sqlite3_vfs* vfs, sqlite3_int64* out) {
  auto* base = owner_of(vfs)->base();
  return base->xCurrentTimeInt64(base, out);
}

}  // namespace

FaultVfs::FaultVfs() : base_(sqlite3_vfs_find(nullptr)) {
  if (base_ == nullptr) {
    throw std::runtime_error("FaultVfs: no default SQLite VFS");
  }
  auto vfs = std::make_unique<sqlite3_vfs>();
  std::memset(vfs.get(), 0, sizeof(sqlite3_vfs));
  vfs->iVersion = 2;
  vfs->szOsFile = static_cast<int>(sizeof(FaultFile)) + base_->szOsFile;
  vfs->mxPathname = base_->mxPathname;
  vfs->zName = "fedcore-fault";
  vfs->pAppData = this;
  vfs->xOpen = x_open;
  vfs->xDelete = x_delete;
  vfs->xAccess = x_access;
  vfs->xFullPathname = x_full_pathname;
  vfs->xRandomness = x_randomness;
  vfs->xSleep = x_sleep;
  vfs->xCurrentTime = x_current_time;
  vfs->xGetLastError = x_get_last_error;
  vfs->xCurrentTimeInt64 = x_current_time_int64;
  if (sqlite3_vfs_register(vfs.get(), 1) != SQLITE_OK) {
    throw std::runtime_error("FaultVfs: sqlite3_vfs_register failed");
  }
  vfs_ = vfs.release();
}

FaultVfs::~FaultVfs() {
  sqlite3_vfs_register(base_, 1);
  sqlite3_vfs_unregister(vfs_);
  delete vfs_;
}

}  // namespace fedcore::store::testing
