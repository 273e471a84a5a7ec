#include "server/api/static_files.hpp"

#include <algorithm>
#include <array>
#include <fstream>
#include <utility>

#include "server/api/http_types.hpp"

namespace fedcore::api {
namespace fs = std::filesystem;

namespace {

// True when `inner` is `root` or below it (both canonical).
bool is_within(const fs::path& root, const fs::path& inner) {
  auto r = root.begin();
  auto i = inner.begin();
  for (; r != root.end(); ++r, ++i) {
    if (i == inner.end() || *r != *i) {
      return false;
    }
  }
  return true;
}

}  // namespace

StaticFiles::StaticFiles(const std::string& root) {
  std::error_code ec;
  root_ = fs::canonical(root.empty() ? fs::path(".") : fs::path(root), ec);
  root_ok_ = !ec && fs::is_directory(root_, ec);
  if (!root_ok_) {
    root_ = fs::absolute(root, ec);
  }
}

result<fs::path> StaticFiles::resolve(std::string_view raw_path) const {
  auto decoded = percent_decode(raw_path);
  if (!decoded) {
    return fail(errc::invalid_argument, "path: " + decoded.error().message);
  }
  const std::string& path = *decoded;
  if (path.empty() || path.front() != '/') {
    return fail(errc::invalid_argument, "path: must start with '/'");
  }
  if (path.find('%') != std::string::npos) {
    return fail(errc::invalid_argument, "path: encoded twice");
  }
  if (std::any_of(path.begin(), path.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\';
      })) {
    return fail(errc::invalid_argument, "path: control character or backslash");
  }
  fs::path relative;
  std::string_view rest(path);
  rest.remove_prefix(1);
  while (!rest.empty()) {
    const auto slash = rest.find('/');
    const auto segment = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (segment.empty()) {
      continue;
    }
    if (segment.front() == '.') {
      return fail(errc::invalid_argument, "path: '.', '..' and hidden segments are refused");
    }
    relative /= fs::path(std::string(segment));
  }
  if (path.back() == '/') {
    relative /= "index.html";
  }
  if (!root_ok_) {
    return fail(errc::not_found, "no such file");
  }
  std::error_code ec;
  // canonical() resolves every symlink, so a link pointing out of the root lands outside
  // it and is caught by the prefix check below.
  auto full = fs::canonical(root_ / relative, ec);
  if (ec || !is_within(root_, full)) {
    return fail(errc::not_found, "no such file");
  }
  if (fs::is_directory(full, ec)) {
    // A folder's index, under the same checks.
    full = fs::canonical(full / "index.html", ec);
    if (ec || !is_within(root_, full)) {
      return fail(errc::not_found, "no such file");
    }
  }
  if (!fs::is_regular_file(full, ec)) {
    return fail(errc::not_found, "no such file");
  }
  return full;
}

result<StaticFile> StaticFiles::load(std::string_view raw_path) const {
  auto path = resolve(raw_path);
  if (!path) {
    return path.error();
  }
  std::error_code ec;
  const auto size = fs::file_size(*path, ec);
  if (ec) {
    return fail(errc::io_error, "cannot stat file");
  }
  if (size > kMaxStaticFileBytes) {
    return fail(errc::resource_exhausted, "file too large to serve");
  }
  std::ifstream in(*path, std::ios::binary);
  std::string body(static_cast<std::size_t>(size), '\0');
  if (!in || !in.read(body.data(), static_cast<std::streamsize>(size))) {
    return fail(errc::io_error, "cannot read file");
  }
  return StaticFile{*path, std::string(content_type_for(*path)), std::move(body)};
}

std::string_view content_type_for(const fs::path& file) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 15> kTypes{{
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".json", "application/json"},
      {".map", "application/json"},
      {".woff2", "font/woff2"},
      {".woff", "font/woff"},
      {".txt", "text/plain; charset=utf-8"},
      {".webmanifest", "application/manifest+json"},
      {".jpg", "image/jpeg"},
      {".webp", "image/webp"},
  }};
  const auto ext = file.extension().string();
  for (const auto& [e, type] : kTypes) {
    if (e == ext) {
      return type;
    }
  }
  return "application/octet-stream";
}

}  // namespace fedcore::api
