#include "server/federation/update_buffer.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <system_error>
#include <unistd.h>
#include <utility>

#include "server/store/disk_probe.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::federation {
namespace {

// Spilled rows are mapped in extents of about this size: one mapping per extent rather than
// per row keeps small rows from costing a page and a mapping each. Rows larger than this get
// an extent each. An extent is mapped whole when its first row comes, but the file only
// grows row by row (reserve_row), so the file holds the rows and no more.
constexpr std::size_t kExtentBytes = std::size_t{8} << 20;

// The largest page-cache folio of x86-64 (a PMD, 2 MiB with 4 KiB pages); see release_rows.
constexpr std::uintptr_t kLargestFolio = std::uintptr_t{2} << 20;

std::size_t page_size() noexcept {
  static const auto size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

std::size_t round_up(std::size_t bytes, std::size_t unit) noexcept {
  return (bytes + unit - 1) / unit * unit;
}

error os_error(int system_errno, const std::string& what) {
  return fail(store::errc_from_errno(system_errno), what + ": " + std::strerror(system_errno));
}

std::filesystem::path temp_dir() {
  std::error_code ignored;
  auto dir = std::filesystem::temp_directory_path(ignored);
  return dir.empty() ? std::filesystem::path("/tmp") : dir;
}

}  // namespace

UpdateBuffer::UpdateBuffer(std::size_t dim, std::size_t memory_budget_bytes,
                           std::filesystem::path scratch_dir)
    : dim_(dim),
      memory_budget_bytes_(memory_budget_bytes),
      scratch_dir_(scratch_dir.empty() ? temp_dir() : std::move(scratch_dir)) {}

UpdateBuffer::~UpdateBuffer() {
  clear();
}

// Memory rows are one std::vector each rather than one block: adding a row allocates
// exactly that row (a growing block would reallocate and copy, holding up to twice the
// budget for a moment), rows never move, and clear() hands each back to the allocator.
// Once a row has spilled every later one spills too, so the memory rows are always rows
// 0 .. k-1 and row(i) needs no table.
result<void> UpdateBuffer::add(std::span<const float> row) {
  FEDCORE_ASSERT(row.size() == dim_, "UpdateBuffer::add: the row's size differs from dim()");
  const bool all_in_memory = rows_ == memory_rows_.size();
  if (all_in_memory && bytes_in_memory() + row_bytes() <= memory_budget_bytes_) {
    memory_rows_.emplace_back(row.begin(), row.end());
    ++rows_;
    return {};
  }
  if (fd_ < 0) {
    if (auto opened = open_scratch_file(); !opened) {
      return opened;
    }
  }
  const std::size_t spilled = rows_ - memory_rows_.size();
  if (spilled == extents_.size() * rows_per_extent()) {
    if (auto mapped = map_extent(); !mapped) {
      return mapped;
    }
  }
  if (auto reserved = reserve_row(spilled); !reserved) {
    return reserved;
  }
  float* slot = spilled_row(spilled);
  std::memcpy(slot, row.data(), row_bytes());
  // The written pages go on to the file through the page cache; they need not stay ours.
  release_rows(spilled, 0, row_bytes());
  ++rows_;
  return {};
}

std::span<const float> UpdateBuffer::row(std::size_t i) const {
  FEDCORE_ASSERT(i < rows_, "UpdateBuffer::row: index out of range");
  if (i < memory_rows_.size()) {
    return memory_rows_[i];
  }
  return {spilled_row(i - memory_rows_.size()), dim_};
}

void UpdateBuffer::clear() noexcept {
  memory_rows_.clear();
  memory_rows_.shrink_to_fit();
  for (const auto& extent : extents_) {
    ::munmap(extent.data, extent.mapped_bytes);
  }
  extents_.clear();
  // The file has no name: closing its last descriptor frees its blocks.
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  rows_ = 0;
}

void UpdateBuffer::release_spilled(std::size_t first, std::size_t count) const noexcept {
  FEDCORE_ASSERT(first <= dim_ && count <= dim_ - first,
                 "UpdateBuffer::release_spilled: coordinates out of range");
  if (count == 0) {
    return;
  }
  for (std::size_t s = 0; s < rows_ - memory_rows_.size(); ++s) {
    release_rows(s, first * sizeof(float), count * sizeof(float));
  }
}

std::size_t UpdateBuffer::rows_per_extent() const noexcept {
  return std::max<std::size_t>(1, kExtentBytes / std::max<std::size_t>(1, row_bytes()));
}

float* UpdateBuffer::spilled_row(std::size_t spilled_index) const noexcept {
  const std::size_t per_extent = rows_per_extent();
  return extents_[spilled_index / per_extent].data + (spilled_index % per_extent) * dim_;
}

// mkstemp and an immediate unlink: the name exists for a few microseconds, and from then on
// nothing is left behind however the process ends. O_CLOEXEC keeps the descriptor (and so
// the blocks) from living on in a child process.
result<void> UpdateBuffer::open_scratch_file() {
  std::string name = (scratch_dir_ / "fedcore-updates-XXXXXX").string();
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) {
    return os_error(errno, "cannot create a scratch file in '" + scratch_dir_.string() +
                               "' for the updates beyond the memory budget of " +
                               std::to_string(memory_budget_bytes_) + " bytes");
  }
  if (::unlink(name.c_str()) != 0) {
    const int unlink_errno = errno;
    ::close(fd);
    return os_error(unlink_errno, "cannot unlink the scratch file '" + name + "'");
  }
  fd_ = fd;
  scratch_name_ = std::move(name);
  return {};
}

std::size_t UpdateBuffer::extent_bytes() const noexcept {
  return round_up(rows_per_extent() * row_bytes(), page_size());
}

// Mapping past the end of the file is allowed; only touching a page wholly past it would
// fault, and add() touches a row only once reserve_row has grown the file over it.
result<void> UpdateBuffer::map_extent() {
  const std::size_t bytes = extent_bytes();
  const auto offset = static_cast<off_t>(extents_.size() * bytes);
  void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, offset);
  if (mapped == MAP_FAILED) {
    return os_error(errno, "cannot map " + std::to_string(bytes) + " bytes of the scratch file '" +
                               scratch_name_ + "' (unlinked)");
  }
  extents_.push_back(Extent{static_cast<float*>(mapped), bytes});
  return {};
}

// posix_fallocate both extends the file over the row (what ftruncate would do) and reserves
// its blocks: a file only extended is sparse, and a full disk would then surface as SIGBUS
// on the first write to a mapped page. Reserved here, it is ENOSPC from add().
result<void> UpdateBuffer::reserve_row(std::size_t spilled_index) {
  const std::size_t per_extent = rows_per_extent();
  const std::size_t offset =
      spilled_index / per_extent * extent_bytes() + spilled_index % per_extent * row_bytes();
  int failed = 0;
  do {
    failed = ::posix_fallocate(fd_, static_cast<off_t>(offset), static_cast<off_t>(row_bytes()));
  } while (failed == EINTR);
  if (failed != 0) {
    return os_error(failed, "cannot reserve " + std::to_string(row_bytes()) +
                                " bytes for an update in the scratch file '" + scratch_name_ +
                                "' (unlinked), which holds " + std::to_string(spilled_index) +
                                " already");
  }
  return {};
}

// A fault on a file mapping maps in the whole page-cache folio around the page (large folios,
// up to kLargestFolio), so releasing only the range just read would see the next block's
// fault map the earlier part of its folio back in, and a pass would end with most of the file
// resident. Releasing from kLargestFolio before the range catches those pages once their
// folio is behind the pass. The range is clipped to its extent's mapping: beyond it lies
// other memory, and MADV_DONTNEED on anonymous memory would zero it. A page shared with a
// neighbouring row may go too, which costs that row a fault from the page cache and nothing
// else: on a shared file mapping MADV_DONTNEED keeps the data (dirty pages are handed to
// the page cache for writeback), which is why memory rows never come here. A refused hint
// changes nothing but the resident set, so its error is dropped.
void UpdateBuffer::release_rows(std::size_t spilled_index, std::size_t first_byte,
                                std::size_t bytes) const noexcept {
  const Extent& extent = extents_[spilled_index / rows_per_extent()];
  const auto base = reinterpret_cast<std::uintptr_t>(extent.data);
  const auto from = reinterpret_cast<std::uintptr_t>(spilled_row(spilled_index)) + first_byte;
  const auto begin =
      std::max(base, from > kLargestFolio ? from - kLargestFolio : 0) / page_size() * page_size();
  const auto end = std::min(base + extent.mapped_bytes, round_up(from + bytes, page_size()));
  (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace fedcore::federation
