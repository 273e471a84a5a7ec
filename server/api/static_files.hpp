// The dashboard's files, served from one folder (the web root) and nothing outside it.
//
// A request path is decoded once and then refused (invalid_argument, 400) when the
// decoded text still contains '%' (double encoding), a NUL or other control byte, a
// backslash, or a "." / ".." / hidden (dot-first) segment. What remains is joined to
// the web root and canonicalised with symlinks resolved; a result outside the root (a
// symlink that leaves it) is not_found, like a missing file, so the answer reveals
// nothing about the rest of the disk. "/" and paths ending in "/" mean index.html.
//
// Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "shared/util/error.hpp"

namespace fedcore::api {

// Largest file served (a whole file is read into memory per request).
inline constexpr std::uintmax_t kMaxStaticFileBytes = 32u << 20;

struct StaticFile {
  std::filesystem::path path;  // canonical, inside the root
  std::string content_type;
  std::string body;
};

class StaticFiles {
 public:
  // `root` need not exist (then every file is not_found); it is canonicalised here.
  explicit StaticFiles(const std::string& root);

  // Resolves and reads the file for the raw (undecoded) request path. Errors:
  // invalid_argument (a path refused as above), not_found, io_error,
  // resource_exhausted (over kMaxStaticFileBytes).
  result<StaticFile> load(std::string_view raw_path) const;
  // Only the resolution step (for tests): the canonical path inside the root.
  result<std::filesystem::path> resolve(std::string_view raw_path) const;

  const std::filesystem::path& root() const noexcept { return root_; }

 private:
  std::filesystem::path root_;
  bool root_ok_ = false;
};

// The Content-Type for a file name by its extension; application/octet-stream when
// unknown.
std::string_view content_type_for(const std::filesystem::path& file);

}  // namespace fedcore::api
