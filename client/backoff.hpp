// Backoff: how long a daemon waits before it reconnects, and when it starts over.
//
// Waits use "decorrelated jitter" (AWS Architecture Blog, "Exponential Backoff And
// Jitter", 2015), bounded before the draw: each wait is drawn uniformly, in whole
// milliseconds, from [min, min(cap, 3 x the previous wait)], the first one after a reset
// from [min, min(cap, 3 x min)]. So every wait lies in [min, cap], waits grow by 1.5x on
// average while the server stays away, and two clients that drew the same wait once draw
// from different ranges next time. client/backoff.cpp says why this and not the 0.5-1.5x
// exponential it replaces.
//
// Starting over: the daemon calls reset() after a *healthy session*, defined by
// is_healthy_session below: the server WELCOMEd the client and the connection then stayed
// up for at least `healthy_after` (ClientOptions::healthy_session, a minute by default)
// on the daemon's steady clock, however it ended (GOODBYE, a lost link, an error). A
// session that never got a WELCOME, or that a crash-looping server drops within the
// minute, does not reset it, so such a server sees ever longer, spread-out waits.
//
// Seeds: two daemons with the same seed draw the same waits, and after a server restart
// they would all come back in the same instant. A daemon's seed is therefore its own:
// jitter_seed(client_id) mixes OS randomness with the client's identity, drawn once per
// process start; tests and fedcore-sim inject fixed seeds (ClientOptions::seed).
//
// Thread safety: a Backoff has none (one daemon's coroutine); jitter_seed is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "shared/util/rng.hpp"

namespace fedcore::client {

class Backoff {
 public:
  // `min` is raised to 1 ms and `cap` to `min` when smaller.
  Backoff(std::chrono::milliseconds min, std::chrono::milliseconds cap, std::uint64_t seed);

  // The wait before the next attempt, in [min, cap]; the next call draws from a range
  // that grows with this wait.
  std::chrono::milliseconds next();
  // Starts over: the next wait is drawn from [min, min(cap, 3 x min)].
  void reset() noexcept;

  std::chrono::milliseconds min() const noexcept { return min_; }
  std::chrono::milliseconds cap() const noexcept { return cap_; }

 private:
  std::chrono::milliseconds min_;
  std::chrono::milliseconds cap_;
  std::chrono::milliseconds previous_;  // the last wait, or min_ after a reset
  Rng rng_;
};

// How long a WELCOMEd session must last to count as healthy, unless the daemon is told
// otherwise (ClientOptions::healthy_session).
inline constexpr std::chrono::milliseconds kHealthySession{std::chrono::minutes(1)};

// True when a session was healthy: `welcomed` (the server sent WELCOME) and it lasted at
// least `healthy_after`, from the connection being established to the session's end.
[[nodiscard]] bool is_healthy_session(bool welcomed, std::chrono::milliseconds lasted,
                                      std::chrono::milliseconds healthy_after) noexcept;

// A jitter seed for this client and this process start: 64 bits of OS randomness
// (std::random_device) mixed with `client_id`, so two sites differ even where the OS
// source were weak, and one site differs between restarts. Never throws: when the OS
// source is unavailable, the steady clock's reading stands in for it.
[[nodiscard]] std::uint64_t jitter_seed(std::string_view client_id);
// The mixing alone (splitmix64 over `entropy` and an FNV-1a hash of `client_id`):
// deterministic, so tests can check that distinct ids give distinct seeds.
[[nodiscard]] std::uint64_t jitter_seed(std::string_view client_id, std::uint64_t entropy) noexcept;

}  // namespace fedcore::client
