// Distributed DP sizing: under secure aggregation the server sees only the sum, so each
// client adds its own share of the noise. Independent Gaussians add in variance: if each
// of n clients adds N(0, s²), the sum carries N(0, n·s²). The round must stay private when
// only the minimum m clients survive (the others drop out and their noise with them), so
// each client adds
//     s = z·C / √m
// and any n >= m survivors give the sum a standard deviation of at least z·C, the noise
// the accountant assumes. m is the round's secagg::required_survivors: the Shamir
// threshold t, or the run's quorum when that is larger (sites refuse to sign a shorter
// survivor list, so no sum of fewer is ever unmasked). (More survivors add more noise than needed:
// the price of tolerating dropouts.) This covers honest-but-curious aggregation only; clients that
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

// Adaptive clipping under secure aggregation (privacy/adaptive_clip.hpp): each site puts
// its centred unclipped bit (±1/2), with distributed DP plus its share of the count noise,
// into one slot of the masked vector, where every value is clipped to ±clip_range before
// it is quantized. Clipping the noise would weaken it, so the slot carries report / scale
// with a public scale that keeps a report inside the range out to 8 standard deviations of
// its noise share; the server multiplies the slot's sum by the same scale.
struct ClipReportSlot {
  double share_stddev = 0;  // the site's share of N(0, count_stddev²): count_stddev/√t, or 0
  double scale = 1;         // max(1, (1/2 + 8·share_stddev) / clip_range)
};
// `distributed`: each site adds its share of the count noise (else the server adds it all).
// Errors: invalid_argument if count_stddev or clip_range is not positive and finite, or
// min_survivors is 0.
result<ClipReportSlot> clip_report_slot(double count_stddev, bool distributed,
                                        std::uint64_t min_survivors, double clip_range);

}  // namespace fedcore::privacy
