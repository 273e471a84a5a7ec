#include "shared/util/rng.hpp"

#include <cmath>

#include "shared/util/assert.hpp"

namespace fedcore {
namespace {

std::uint64_t splitmix64(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
  return (x << k) | (x >> (64 - k));
}

}  // namespace

Rng::Rng(std::uint64_t seed) noexcept {
  for (auto& word : state_) {
    word = splitmix64(seed);
  }
}

std::uint64_t Rng::next_u64() noexcept {
  const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const std::uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

float Rng::uniform_float() noexcept {
  return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f);
}

double Rng::uniform_double() noexcept {
  return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
}

std::uint64_t Rng::below(std::uint64_t bound) noexcept {
  FEDCORE_ASSERT(bound > 0, "Rng::below needs a positive bound");
  // Reject the top partial bucket so every value is equally likely.
  const std::uint64_t limit = (~std::uint64_t{0}) - (~std::uint64_t{0}) % bound;
  std::uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return x % bound;
}

double Rng::normal() noexcept {
  if (has_spare_) {
    has_spare_ = false;
    return spare_normal_;
  }
  double u1;
  do {
    u1 = uniform_double();
  } while (u1 <= 0.0);
  const double u2 = uniform_double();
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * M_PI * u2;
  spare_normal_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

double Rng::gamma(double shape) noexcept {
  FEDCORE_ASSERT(shape > 0, "Rng::gamma needs a positive shape");
  if (shape < 1.0) {
    // Boost the shape above 1, then scale back: G(a) = G(a+1) * U^(1/a).
    double u;
    do {
      u = uniform_double();
    } while (u <= 0.0);
    return gamma(shape + 1.0) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x;
    double v;
    do {
      x = normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = uniform_double();
    if (u < 1.0 - 0.0331 * x * x * x * x ||
        std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) {
      return d * v;
    }
  }
}

Rng Rng::split() noexcept {
  return Rng(next_u64() ^ 0x6a09e667f3bcc909ULL);
}

}  // namespace fedcore
