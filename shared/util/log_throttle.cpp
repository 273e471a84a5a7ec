#include "shared/util/log_throttle.hpp"

namespace fedcore {

std::optional<std::uint64_t> LogThrottle::admit(std::string_view key, Clock::steady_time now) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= max_keys_) {
      entries_.clear();  // many distinct keys (addresses) are not a storm of one line
    }
    entries_.emplace(std::string(key), Entry{now, 0});
    return 0;
  }
  auto& entry = it->second;
  if (now - entry.last < interval_) {
    ++entry.suppressed;
    return std::nullopt;
  }
  const auto suppressed = entry.suppressed;
  entry = Entry{now, 0};
  return suppressed;
}

std::string suppressed_suffix(std::uint64_t suppressed) {
  return suppressed == 0 ? std::string() : " (and " + std::to_string(suppressed) + " more like it)";
}

}  // namespace fedcore
