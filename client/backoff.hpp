// Backoff: how long a daemon waits before it reconnects.
//
// Exponential with jitter: the n-th wait after a failure is initial * 2^n, capped at
// `max`, times a random factor in [0.5, 1.5) so that hospitals whose server restarted do
// not all come back in the same instant. A session that got going resets it.
//
// Thread safety: none (one daemon's coroutine).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "shared/util/rng.hpp"

namespace fedcore::client {

class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max, std::uint64_t seed)
      : initial_(initial), max_(std::max(initial, max)), current_(initial), rng_(seed) {}

  // The wait before the next attempt; doubles the one after it (up to max).
  std::chrono::milliseconds next() {
    const double jitter = 0.5 + rng_.uniform_double();
    const auto wait = std::chrono::milliseconds(
        static_cast<std::int64_t>(static_cast<double>(current_.count()) * jitter));
    current_ = std::min(current_ * 2, max_);
    return wait;
  }
  void reset() noexcept { current_ = initial_; }

 private:
  std::chrono::milliseconds initial_;
  std::chrono::milliseconds max_;
  std::chrono::milliseconds current_;
  Rng rng_;
};

}  // namespace fedcore::client
