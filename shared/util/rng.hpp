// Rng: a small, fast, seedable random generator whose streams are identical on every
// platform and standard library (std::normal_distribution and friends are not), so a
// seed reproduces initialisation, shuffling, sampling and partitions bit for bit.
//
// xoshiro256** seeded through splitmix64 (Blackman and Vigna). Not cryptographic: never
// use it for nonces or keys.
//
// Thread safety: none; give each thread its own Rng (see `split`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace fedcore {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) noexcept;

  std::uint64_t next_u64() noexcept;
  // Uniform in [0, 1), 24 random bits.
  float uniform_float() noexcept;
  // Uniform in [0, 1), 53 random bits.
  double uniform_double() noexcept;
  // Uniform integer in [0, bound). REQUIRES: bound > 0. Unbiased (rejection).
  std::uint64_t below(std::uint64_t bound) noexcept;
  // Standard normal (Box-Muller, both values used).
  double normal() noexcept;
  // Gamma(shape, 1) by Marsaglia-Tsang; REQUIRES shape > 0.
  double gamma(double shape) noexcept;
  // A new generator whose stream is independent of this one's (for a child task).
  Rng split() noexcept;

  // Fisher-Yates shuffle.
  template <class T>
  void shuffle(std::span<T> items) noexcept {
    for (std::size_t i = items.size(); i > 1; --i) {
      std::swap(items[i - 1], items[below(i)]);
    }
  }

 private:
  std::uint64_t state_[4];
  double spare_normal_ = 0;
  bool has_spare_ = false;
};

}  // namespace fedcore
