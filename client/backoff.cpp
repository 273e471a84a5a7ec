#include "client/backoff.hpp"

#include <algorithm>
#include <random>

namespace fedcore::client {
namespace {

using std::chrono::milliseconds;

std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t fnv1a(std::string_view text) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : text) {
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

Backoff::Backoff(milliseconds min, milliseconds cap, std::uint64_t seed)
    : min_(std::max(min, milliseconds(1))),
      cap_(std::max(cap, min_)),
      previous_(min_),
      rng_(seed) {}

// Why decorrelated jitter, and why bounded before the draw. The old schedule,
// base * 2^n * U[0.5, 1.5), had three faults: it could wait 1.5x past the cap and half the
// minimum; every client that started over drew from the same narrow band around `min`;
// and clients stayed in lockstep whenever their seeds matched. Of the AWS post's options,
// "full jitter" (U[0, min(cap, base * 2^n)]) spreads best but can wait ~0 ms, which sends
// clients into a server that is still starting; decorrelated jitter keeps `min` as a
// floor and spreads the first retry over [min, 3 min]. The post clamps after the draw,
// min(cap, U[min, 3 prev]), which in a long outage puts about two thirds of the draws at
// exactly `cap` (a small herd of its own); bounding the range first keeps the draws
// uniform up to the cap.
milliseconds Backoff::next() {
  const auto upper = std::min(cap_, previous_ * 3);
  const auto span = static_cast<std::uint64_t>((upper - min_).count()) + 1;
  previous_ = min_ + milliseconds(static_cast<std::int64_t>(rng_.below(span)));
  return previous_;
}

void Backoff::reset() noexcept {
  previous_ = min_;
}

bool is_healthy_session(bool welcomed, milliseconds lasted, milliseconds healthy_after) noexcept {
  return welcomed && lasted >= healthy_after;
}

std::uint64_t jitter_seed(std::string_view client_id, std::uint64_t entropy) noexcept {
  return splitmix64(splitmix64(entropy) ^ fnv1a(client_id));
}

std::uint64_t jitter_seed(std::string_view client_id) {
  std::uint64_t entropy = 0;
  try {
    std::random_device os;
    entropy = (std::uint64_t{os()} << 32) ^ std::uint64_t{os()};
  } catch (const std::exception&) {
    // No OS source (std::random_device may throw where none exists): the clock's reading
    // still differs between process starts, and the id between sites.
    entropy =
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return jitter_seed(client_id, entropy);
}

}  // namespace fedcore::client
