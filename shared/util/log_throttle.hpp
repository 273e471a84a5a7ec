// LogThrottle: at most one log line per key and interval.
//
// A failure that repeats in a tight loop (accept() at the descriptor limit, a peer that
// reconnects a thousand times a second) must not turn into a log storm: 1.44 million
// "accept failed" lines in 4 s once took a server's CPU and 102 MB of disk. The first
// occurrence of a key is logged; later ones within `interval` are counted, and the next
// line that gets through says how many were suppressed.
//
// Thread safety: none (one per io_context thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "shared/util/clock.hpp"

namespace fedcore {

class LogThrottle {
 public:
  explicit LogThrottle(std::chrono::milliseconds interval, std::size_t max_keys = 256)
      : interval_(interval), max_keys_(max_keys) {}

  // nullopt: do not log this one (it was counted). Otherwise log it, adding the returned
  // number of lines suppressed since the key was last logged (0 for none).
  std::optional<std::uint64_t> admit(std::string_view key, Clock::steady_time now);

 private:
  struct Entry {
    Clock::steady_time last;
    std::uint64_t suppressed = 0;
  };
  std::chrono::milliseconds interval_;
  std::size_t max_keys_;
  std::map<std::string, Entry, std::less<>> entries_;
};

// " (and N more like it)" for N > 0, "" otherwise: the suffix of a throttled line.
std::string suppressed_suffix(std::uint64_t suppressed);

}  // namespace fedcore
