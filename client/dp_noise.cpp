#include "client/dp_noise.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <openssl/rand.h>

namespace fedcore::client {

result<void> CryptoUniform::fill(std::span<double> out) {
  // The random words are written over the doubles' own storage and then converted in
  // place, in chunks that fit RAND_priv_bytes' int length.
  constexpr std::size_t kChunk = 1 << 16;
  static_assert(sizeof(double) == sizeof(std::uint64_t));
  for (std::size_t begin = 0; begin < out.size(); begin += kChunk) {
    const std::size_t count = std::min(kChunk, out.size() - begin);
    // RAND_priv_bytes: the DRBG OpenSSL keeps for secrets, apart from the one nonces use.
    if (RAND_priv_bytes(reinterpret_cast<unsigned char*>(out.data() + begin),
                        static_cast<int>(count * sizeof(double))) != 1) {
      return fail(errc::unavailable,
                  "RAND_priv_bytes failed: no cryptographic randomness for DP-SGD sampling");
    }
    for (std::size_t i = begin; i < begin + count; ++i) {
      std::uint64_t word;
      std::memcpy(&word, &out[i], sizeof word);
      out[i] = static_cast<double>(word >> 11) * 0x1.0p-53;  // top 53 bits: [0, 1)
    }
  }
  return {};
}

model::DpRandom CryptoDpRandom::random() {
  return {[this](std::span<double> out) { return normal_.fill_standard_normal(out); },
          [this](std::span<double> out) { return uniform_.fill(out); }};
}

}  // namespace fedcore::client
