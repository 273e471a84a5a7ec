#include "shared/privacy/noise_source.hpp"

#include <cmath>
#include <numbers>

#include <openssl/rand.h>

namespace fedcore::privacy {
namespace {

// A uniform in (0, 1] from the top 53 bits: never 0, so log(u) is finite.
double uniform_open_closed(std::uint64_t word) noexcept {
  return static_cast<double>((word >> 11) + 1) * 0x1.0p-53;
}

}  // namespace

result<std::uint64_t> CryptoNormal::next_word() {
  if (used_ == block_.size()) {
    // RAND_priv_bytes: the DRBG OpenSSL keeps for secrets, separate from the public one
    // that nonces use, so noise is never drawn from a stream whose outputs are also sent.
    if (RAND_priv_bytes(reinterpret_cast<unsigned char*>(block_.data()),
                        static_cast<int>(sizeof block_)) != 1) {
      return fail(errc::unavailable,
                  "RAND_priv_bytes failed: no cryptographic randomness for DP noise");
    }
    used_ = 0;
  }
  return block_[used_++];
}

result<void> CryptoNormal::fill_standard_normal(std::span<double> out) {
  // Box-Muller: r = sqrt(-2 ln u1), θ = 2π u2 give r cos θ and r sin θ, independent N(0,1).
  for (std::size_t i = 0; i < out.size(); i += 2) {
    auto w1 = next_word();
    if (!w1) {
      return w1.error();
    }
    auto w2 = next_word();
    if (!w2) {
      return w2.error();
    }
    const double r = std::sqrt(-2.0 * std::log(uniform_open_closed(*w1)));
    const double theta = 2.0 * std::numbers::pi * uniform_open_closed(*w2);
    out[i] = r * std::cos(theta);
    if (i + 1 < out.size()) {
      out[i + 1] = r * std::sin(theta);
    }
  }
  return {};
}

result<void> SeededNormal::fill_standard_normal(std::span<double> out) {
  for (double& x : out) {
    x = rng_.normal();
  }
  return {};
}

}  // namespace fedcore::privacy
