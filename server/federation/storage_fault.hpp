// Storage faults: what the run controller does when the disk refuses a write it needs (a
// round's checkpoint file, the round's commit). docs/operations.md, "Disk full and
// read-only storage", is the operator's side of it.
//
// Such a round is not recorded at all: the checkpoint file is written under a temporary
// name and renamed only once complete (model::write_file_atomically), the round's rows go
// in one transaction, so the history keeps exactly the rounds committed before, each
// naming a complete file. The run is paused with a reason that starts with the kind of
// fault ("disk full: ...", "read-only storage: ...", "storage error: ...") and put on
// hold: the controller probes the checkpoint directory and the database's directory after
// StorageRetry::first_probe, doubling the interval up to max_interval, and resumes the run
// from its last committed round as soon as both take a write of the run's checkpoint size
// plus a margin and the database records the resume. An admin's resume probes at once.
//
// The paused state is written to the history when the database still takes that small
// write; when it does not, the history keeps saying running (a restart then resumes the
// run, as after a crash) and the hold is what the admin API and the metrics show.
//
// Thread safety: none (the controller's thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "shared/util/clock.hpp"
#include "shared/util/error.hpp"

namespace fedcore::federation {

enum class StorageFaultKind {
  disk_full,  // no room (ENOSPC, EDQUOT)
  read_only,  // the file system or file refuses writes (EROFS, EACCES, EPERM, SQLITE_READONLY)
  io_error,   // anything else the storage refused (EIO, ...)
};
// The reason's prefix: "disk full", "read-only storage", "storage error".
std::string_view storage_fault_text(StorageFaultKind kind) noexcept;
// The machine name, for JSON and metric labels: "disk_full", "read_only", "io_error".
std::string_view storage_fault_code(StorageFaultKind kind) noexcept;
// The kind a storage error's code stands for (store::probe_directory's table):
// resource_exhausted is disk_full, permission_denied read_only, anything else io_error.
StorageFaultKind storage_fault_kind(errc code) noexcept;
// The kind of a run's stored pause reason that starts with a kind's text and ": ", or
// nothing (a pause for another reason).
std::optional<StorageFaultKind> storage_fault_of_reason(std::string_view reason) noexcept;
// Whether a failed store write is the storage's doing, so that the run waits for the
// storage instead of ending: io_error, permission_denied, resource_exhausted. (Every
// failure of a checkpoint file write is the storage's.)
bool is_storage_failure(const error& failure) noexcept;

// The two writes a round's commit needs.
enum class FailedWrite {
  checkpoint_file,  // the global model's file (every failure of it is the storage's)
  round_commit,     // the history's transaction
};

// How the controller waits for the storage.
struct StorageRetry {
  std::chrono::milliseconds first_probe{std::chrono::seconds(2)};
  std::chrono::milliseconds max_interval{std::chrono::seconds(60)};
  // What a probe must be able to write beyond one checkpoint file: room for the history's
  // growth in the same round.
  std::uint64_t margin_bytes = std::uint64_t{1} << 20;
};

// The disks as the run controller uses them; tests inject failing ones.
class Disks {
 public:
  virtual ~Disks() = default;
  // Writes a file, given in pieces, atomically: model::write_file_atomically's contract.
  [[nodiscard]] virtual result<void> write_file(
      const std::string& path, std::span<const std::span<const std::byte>> parts) = 0;
  // Can `dir` take `bytes` now: store::probe_directory's contract.
  [[nodiscard]] virtual result<void> probe(const std::string& dir, std::uint64_t bytes) = 0;
};

// The real file system (stateless).
class RealDisks final : public Disks {
 public:
  result<void> write_file(const std::string& path,
                          std::span<const std::span<const std::byte>> parts) override;
  result<void> probe(const std::string& dir, std::uint64_t bytes) override;
};

// A run paused because the storage refused a write, waiting for the storage.
struct StorageHold {
  std::int64_t run_id = 0;
  std::int64_t after_round = 0;  // its last committed round: it continues after it
  StorageFaultKind kind = StorageFaultKind::io_error;
  std::string reason;               // as recorded and shown: "disk full: cannot write '...': ..."
  std::string last_probe_error;     // why the latest probe failed; empty before the first
  std::int64_t since_ms = 0;        // wall clock, when the write failed
  bool recorded = false;            // the history holds the paused state and the reason
  std::int64_t probes = 0;          // probes that failed so far
  std::uint64_t reserve_bytes = 0;  // what a probe writes in each directory
  std::chrono::milliseconds interval{0};  // from the latest probe (or the fault) to the next
  Clock::steady_time next_probe;
};

}  // namespace fedcore::federation
