// What every fuzz target shares: the input as text, an in-memory file for the loaders
// that only take a path, and a loud failure for a broken round-trip invariant.
//
// The loaders (CSV, IDX, CIFAR-10) open files by path, as production does with a site's
// files. A memfd gives them a real path (/proc/self/fd/N) without touching the disk, so
// the target runs the unchanged file code and thousands of iterations a second.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace fedcore::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

inline std::span<const std::byte> as_bytes(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

// An anonymous in-memory file holding `bytes`, closed on destruction.
class MemFile {
 public:
  explicit MemFile(std::span<const std::byte> bytes);
  ~MemFile();
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  // "/proc/self/fd/N": opens the same bytes from the start each time.
  const std::string& path() const noexcept { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// A property the code promises (e.g. "what to_metadata writes, parse accepts") does not
// hold: print it and abort, which libFuzzer reports as a crash with the input saved.
[[noreturn]] void invariant_failed(std::string_view target, std::string_view what);

}  // namespace fedcore::fuzz
