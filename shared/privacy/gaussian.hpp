// Clipping and the Gaussian mechanism over flat float buffers (habit 9).
//
// A client's update is clipped to L2 norm C (its sensitivity); the server (central DP)
// or each client (distributed DP, distributed_dp.hpp) adds N(0, (z·C)²) noise to every
// coordinate, z the noise multiplier the accountant was given.
//
// Thread safety: the functions touch only their arguments; a NoiseSource is not shared.
#pragma once

#include <span>

#include "shared/privacy/noise_source.hpp"
#include "shared/util/error.hpp"

namespace fedcore::privacy {

struct ClipResult {
  double norm = 0;       // the L2 norm before clipping (computed in double)
  bool clipped = false;  // true if the values were scaled down
};

// Scales `values` in place so that their L2 norm is at most clip_norm: values whose norm
// is at most clip_norm are left as they are, others are scaled to a norm a few float ulps
// below clip_norm (so float rounding cannot push it above).
// Errors: invalid_argument if clip_norm is not positive and finite, or a value is not
// finite (then `values` is unchanged).
result<ClipResult> clip_l2(std::span<float> values, double clip_norm);

// Adds independent N(0, (noise_multiplier·clip_norm)²) noise to every value, drawn from
// `noise` (CryptoNormal in production) and added in double before rounding to float.
// Errors: invalid_argument if noise_multiplier is negative or clip_norm not positive (or
// either is not finite); the noise source's error (unavailable) if it fails, in which case
// `values` is partly noised and must be discarded.
result<void> add_gaussian_noise(std::span<float> values, double noise_multiplier, double clip_norm,
                                NoiseSource& noise);

}  // namespace fedcore::privacy
