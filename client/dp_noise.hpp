// The randomness of a site's DP-SGD (shared/model/dp_sgd.hpp), from OpenSSL's private
// CSPRNG: noise from privacy::CryptoNormal and Poisson sampling from CryptoUniform.
//
// Both must be secret from the server: a seed the server chose or could see would let it
// regenerate the noise and subtract it, or know which records were in each step, and
// the accountant's epsilon would mean nothing. So the TRAIN request's seed is never used
// for DP-SGD.
//
// Thread safety: none; one CryptoDpRandom per training.
#pragma once

#include <span>

#include "shared/model/dp_sgd.hpp"
#include "shared/privacy/noise_source.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

// Uniform doubles in [0, 1) with 53 random bits each, from RAND_priv_bytes.
// (shared/privacy has no uniform source yet; this belongs there.)
class CryptoUniform {
 public:
  // Errors: unavailable if RAND_priv_bytes fails (then `out` must not be used).
  result<void> fill(std::span<double> out);
};

// Owns the two sources; random() hands out views of them, valid while this object lives.
class CryptoDpRandom {
 public:
  CryptoDpRandom() = default;
  CryptoDpRandom(const CryptoDpRandom&) = delete;
  CryptoDpRandom& operator=(const CryptoDpRandom&) = delete;

  model::DpRandom random();

 private:
  privacy::CryptoNormal normal_;
  CryptoUniform uniform_;
};

}  // namespace fedcore::client
