// UpdateBuffer: the n updates of one round, held whole for the robust aggregators
// (robust_aggregation.hpp), which need every update at once and not a running sum.
//
// Each update is one row of dim() floats. Rows stay in memory while they fit in the memory
// budget; the rest go to a scratch file, so a round of 100 clients of a 10M-parameter
// model (4 GB of updates) runs with a resident set near the budget:
//
//   rows 0 .. k-1   in memory      k = memory_budget_bytes / (dim * 4), whole rows only
//   rows k .. n-1   scratch file   "<scratch_dir>/fedcore-updates-XXXXXX" (mkstemp), memory-
//                                  mapped MAP_SHARED, read through the page cache
//
// The scratch file is unlinked as soon as it is created: it has no name while the buffer
// uses it, and its blocks return to the file system when the buffer clears or dies, or the
// process does, even by SIGKILL. Its space is reserved (posix_fallocate) when a row is
// added, so a full disk is an error of add() and never a SIGBUS while a mapped row is read.
//
// Thread safety: none for add() and clear(); the const members may be called from several
// threads at once between them.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "shared/util/error.hpp"

namespace fedcore::federation {

class UpdateBuffer {
 public:
  // A buffer for rows of `dim` floats. Rows are kept in memory while their bytes stay within
  // `memory_budget_bytes`; the scratch file for the others is created in `scratch_dir` (empty:
  // the system's temp directory) when the first row goes beyond the budget. Does no I/O.
  UpdateBuffer(std::size_t dim, std::size_t memory_budget_bytes, std::filesystem::path scratch_dir);
  ~UpdateBuffer();
  UpdateBuffer(const UpdateBuffer&) = delete;
  UpdateBuffer& operator=(const UpdateBuffer&) = delete;

  // Appends a copy of `row`. REQUIRES: row.size() == dim().
  // Errors (the buffer is then unchanged), with the scratch file or directory and the
  // operating system's words in the message:
  //   not_found           the scratch directory does not exist
  //   permission_denied   the scratch directory cannot be written
  //   resource_exhausted  no room on its file system for the row (ENOSPC, EDQUOT)
  //   io_error            anything else (mmap failing, EIO, ...)
  [[nodiscard]] result<void> add(std::span<const float> row);

  std::size_t size() const noexcept { return rows_; }
  std::size_t dim() const noexcept { return dim_; }

  // Row i, in the order the rows were added. The span stays valid, and at the same address,
  // until clear() or destruction (add() moves no row). REQUIRES: i < size().
  std::span<const float> row(std::size_t i) const;

  // Removes every row: memory rows are freed, the scratch file is unmapped and closed (its
  // blocks return to the file system). The next row beyond the budget makes a new file.
  void clear() noexcept;

  // Bytes of rows held in memory and in the scratch file (dim * 4 per row; the file
  // reserves exactly its rows, plus holes of under a page where rows are mapped apart).
  std::size_t bytes_in_memory() const noexcept { return memory_rows_.size() * row_bytes(); }
  std::size_t bytes_spilled() const noexcept { return (rows_ - memory_rows_.size()) * row_bytes(); }

  // A hint for a forward pass over the rows in coordinate blocks: coordinates
  // [first, first + count) of the spilled rows, and those up to 2 MiB before them, will not
  // be read again soon, so their pages may leave this process's resident set (MADV_DONTNEED
  // on the shared mapping: the data stays in the file, a later row() reads it back). Memory
  // rows are untouched. Called after each block, a pass keeps at most about 2 MiB plus a
  // block of each spilled row mapped in, and none once it ends; without it a pass would
  // leave the whole file resident (evictable page cache, but counted as our RSS).
  void release_spilled(std::size_t first, std::size_t count) const noexcept;

 private:
  // A run of consecutive spilled rows mapped together, at a page-aligned file offset.
  struct Extent {
    float* data = nullptr;
    std::size_t mapped_bytes = 0;
  };

  std::size_t row_bytes() const noexcept { return dim_ * sizeof(float); }
  std::size_t rows_per_extent() const noexcept;
  std::size_t extent_bytes() const noexcept;
  // Into the shared mapping, which is not this object's state: hence float* from a const.
  float* spilled_row(std::size_t spilled_index) const noexcept;
  [[nodiscard]] result<void> open_scratch_file();
  [[nodiscard]] result<void> map_extent();
  [[nodiscard]] result<void> reserve_row(std::size_t spilled_index);
  void release_rows(std::size_t spilled_index, std::size_t first_byte,
                    std::size_t bytes) const noexcept;

  std::size_t dim_;
  std::size_t memory_budget_bytes_;
  std::filesystem::path scratch_dir_;
  std::size_t rows_ = 0;
  std::vector<std::vector<float>> memory_rows_;
  int fd_ = -1;
  std::string scratch_name_;  // the file's name while it had one, for messages
  std::vector<Extent> extents_;
};

}  // namespace fedcore::federation
