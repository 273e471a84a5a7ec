// Shamir's t-of-n secret sharing (Shamir 1979) over the prime field GF(2^521 - 1), with
// OpenSSL's BIGNUM arithmetic and its private DRBG for the polynomial's coefficients.
//
// A secret of up to 64 bytes is the constant term of a random polynomial of degree t - 1;
// share i is the polynomial at x = i (1-based). Any t shares give the secret back by
// Lagrange interpolation at 0; t - 1 shares are consistent with every possible secret,
// so they tell nothing about it (information-theoretic, not computational).
// SecAgg+ shares each client's self-mask seed and its mask private key this way among its
// graph neighbours.
//
// Thread safety: reentrant.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shared/secagg/crypto.hpp"
#include "shared/util/error.hpp"

namespace fedcore::secagg {

inline constexpr std::size_t kShareValueSize = 66;  // bytes of a field element (521 bits)
inline constexpr std::size_t kMaxSecretSize = 64;

struct Share {
  std::uint32_t x = 0;  // 1-based point
  Bytes y;              // the polynomial at x, big-endian, kShareValueSize bytes
};

// Splits `secret` into `count` shares, any `threshold` of which recover it.
// Errors: invalid_argument when threshold < 1, threshold > count, count > 65535 or the
// secret is longer than kMaxSecretSize.
result<std::vector<Share>> shamir_split(std::span<const std::uint8_t> secret,
                                        std::uint32_t threshold, std::uint32_t count);

// The secret of `secret_size` bytes from at least `threshold` shares (the first
// `threshold` distinct ones are used). Errors: failed_precondition with fewer than
// `threshold` distinct shares; invalid_argument for a malformed share (x = 0, a value not
// in the field, a wrong length) or a result that does not fit `secret_size` bytes (shares
// of different secrets mixed, or corrupted).
result<Bytes> shamir_combine(std::span<const Share> shares, std::uint32_t threshold,
                             std::size_t secret_size);

// Test support for the "t - 1 shares say nothing" property: a share at `x` of a degree
// t - 1 polynomial through `shares` (t - 1 of them) with constant term `candidate`.
// Errors as shamir_combine.
result<Share> share_consistent_with(std::span<const Share> shares,
                                    std::span<const std::uint8_t> candidate, std::uint32_t x);

}  // namespace fedcore::secagg
