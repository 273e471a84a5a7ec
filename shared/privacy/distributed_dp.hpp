// Distributed DP sizing: under secure aggregation the server sees only the sum, so each
// client adds its own share of the noise. Independent Gaussians add in variance: if each
// of n clients adds N(0, s²), the sum carries N(0, n·s²). The round must stay private when
// only the minimum t clients survive (the others drop out and their noise with them), so
// each client adds
//     s = z·C / √t
// and any n >= t survivors give the sum a standard deviation of at least z·C, the noise
// the accountant assumes. (More survivors add more noise than needed: the price of
// tolerating dropouts.) This covers honest-but-curious aggregation only; clients that
// skip their noise are not defended against (that needs the noise to be verified or
// added inside the protocol).
//
// Thread safety: pure function.
#pragma once

#include <cstdint>

#include "shared/util/error.hpp"

namespace fedcore::privacy {

// The standard deviation each client's noise needs: noise_multiplier·clip_norm/√min_survivors.
// Errors: invalid_argument if noise_multiplier is negative, clip_norm not positive (or
// either not finite), or min_survivors is 0.
result<double> per_client_noise_stddev(double noise_multiplier, double clip_norm,
                                       std::uint64_t min_survivors);

}  // namespace fedcore::privacy
