// Client identifiers: the CN of a client's certificate, and the name it has in the
// registry, the database and the logs. One rule everywhere: 1 to 64 characters of
// [A-Za-z0-9._-], so an id is safe in file names, URLs and log lines as it is.
#pragma once

#include <cstddef>
#include <string_view>

namespace fedcore {

inline constexpr std::size_t kMaxClientIdLength = 64;

constexpr bool is_valid_client_id(std::string_view id) noexcept {
  if (id.empty() || id.size() > kMaxClientIdLength) {
    return false;
  }
  for (const char c : id) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!allowed) {
      return false;
    }
  }
  return true;
}

}  // namespace fedcore
