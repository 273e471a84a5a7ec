#include "server/federation/storage_fault.hpp"

#include "server/store/disk_probe.hpp"
#include "shared/model/param_io.hpp"

namespace fedcore::federation {

std::string_view storage_fault_text(StorageFaultKind kind) noexcept {
  switch (kind) {
    case StorageFaultKind::disk_full:
      return "disk full";
    case StorageFaultKind::read_only:
      return "read-only storage";
    case StorageFaultKind::io_error:
      return "storage error";
  }
  return "storage error";
}

std::string_view storage_fault_code(StorageFaultKind kind) noexcept {
  switch (kind) {
    case StorageFaultKind::disk_full:
      return "disk_full";
    case StorageFaultKind::read_only:
      return "read_only";
    case StorageFaultKind::io_error:
      return "io_error";
  }
  return "io_error";
}

StorageFaultKind storage_fault_kind(errc code) noexcept {
  switch (code) {
    case errc::resource_exhausted:
      return StorageFaultKind::disk_full;
    case errc::permission_denied:
      return StorageFaultKind::read_only;
    default:
      return StorageFaultKind::io_error;
  }
}

std::optional<StorageFaultKind> storage_fault_of_reason(std::string_view reason) noexcept {
  for (auto kind :
       {StorageFaultKind::disk_full, StorageFaultKind::read_only, StorageFaultKind::io_error}) {
    const auto text = storage_fault_text(kind);
    if (reason.size() > text.size() + 1 && reason.starts_with(text) &&
        reason.substr(text.size(), 2) == ": ") {
      return kind;
    }
  }
  return std::nullopt;
}

bool is_storage_failure(const error& failure) noexcept {
  // Not unavailable (another writer holds the lock: not the disk's doing), not data_loss (a
  // damaged file needs a person), not the precondition and argument errors of a bug.
  return failure.code == errc::io_error || failure.code == errc::permission_denied ||
         failure.code == errc::resource_exhausted;
}

result<void> RealDisks::write_file(const std::string& path,
                                   std::span<const std::span<const std::byte>> parts) {
  return model::write_file_atomically(path, parts);
}

result<void> RealDisks::probe(const std::string& dir, std::uint64_t bytes) {
  return store::probe_directory(dir, bytes);
}

}  // namespace fedcore::federation
