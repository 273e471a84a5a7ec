// Sources of standard normal noise for the Gaussian mechanism (gaussian.hpp) and the
// adaptive clipping count (adaptive_clip.hpp).
//
// Production noise MUST come from CryptoNormal. Differential privacy holds only if nobody
// who sees the noised output can predict the noise: whoever knows the seed of a seeded
// generator (fedcore::Rng is xoshiro256**, not cryptographic: its state follows from a
// few outputs) regenerates the noise stream and subtracts it, recovering the exact
// clipped sum — all privacy gone while the accountant still reports a small ε.
// SeededNormal exists for tests only (habit 7: randomness comes in through constructors).
//
// Remaining caveat, documented rather than solved: samples are double-precision floats
// from Box-Muller, and floating-point noise is not exactly Gaussian (Mironov 2012 showed
// the low-order bits of a floating-point Laplace sample can reveal the input). Noise is
// added in double and rounded to float, which hides low bits, but is not a proof; a
// discrete Gaussian (Canonne, Kamath, Steinke 2020) would be.
//
// Thread safety: none; one source per thread.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "shared/util/error.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::privacy {

class NoiseSource {
 public:
  virtual ~NoiseSource() = default;
  // Fills `out` with independent N(0, 1) samples.
  // Errors: unavailable if the underlying random source fails (then `out` is unspecified
  // and must not be used).
  virtual result<void> fill_standard_normal(std::span<double> out) = 0;
};

// N(0, 1) from OpenSSL's private CSPRNG (RAND_priv_bytes): 64-bit words fetched in blocks
// of kBlockWords, two 53-bit uniforms per Box-Muller pair, both outputs used.
class CryptoNormal final : public NoiseSource {
 public:
  static constexpr std::size_t kBlockWords = 512;
  result<void> fill_standard_normal(std::span<double> out) override;

 private:
  result<std::uint64_t> next_word();

  std::array<std::uint64_t, kBlockWords> block_{};
  std::size_t used_ = kBlockWords;  // empty: the first draw fetches a block
};

// N(0, 1) from a seeded fedcore::Rng. Deterministic; FOR TESTS ONLY (see above).
class SeededNormal final : public NoiseSource {
 public:
  explicit SeededNormal(std::uint64_t seed) noexcept : rng_(seed) {}
  result<void> fill_standard_normal(std::span<double> out) override;

 private:
  Rng rng_;
};

}  // namespace fedcore::privacy
