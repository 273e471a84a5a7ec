// AuthLimiter: failed authentications per client address (issue 19, "login
// rate-limited"). After `max_failures` failures within `window`, the address is refused
// (429 with Retry-After) until the oldest of those failures is `window` old. Requests
// refused this way are not failures themselves, and successful authentications neither
// count nor reset anything.
//
// Time comes from an injected Clock (steady readings), so tests walk the window with a
// ManualClock. Memory is bounded: at most `max_addresses` addresses are tracked; when a
// new one comes and the table is full, addresses whose failures have all aged out are
// dropped first, then the one with the oldest latest failure.
//
// Thread safety: none (it lives in Api, on the io_context thread).
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "shared/util/clock.hpp"

namespace fedcore::api {

struct AuthLimits {
  std::size_t max_failures = 10;
  std::chrono::seconds window{60};
  std::size_t max_addresses = 10000;
};

class AuthLimiter {
 public:
  // `clock` must outlive the limiter.
  AuthLimiter(const Clock& clock, AuthLimits limits = {});

  // How long `address` must wait (rounded up to whole seconds, at least 1), or nothing
  // when it may try.
  std::optional<std::chrono::seconds> retry_after(std::string_view address);
  // Records a failed authentication from `address`.
  void failed(std::string_view address);

  std::size_t tracked() const noexcept { return failures_.size(); }

 private:
  using Time = Clock::steady_time;
  // Drops the failures of `times` older than the window.
  void age(std::deque<Time>& times, Time now) const;
  void make_room(Time now);

  const Clock& clock_;
  AuthLimits limits_;
  std::unordered_map<std::string, std::deque<Time>> failures_;
};

}  // namespace fedcore::api
