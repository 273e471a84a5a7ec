#include "shared/privacy/distributed_dp.hpp"

#include <cmath>
#include <string>

namespace fedcore::privacy {

result<double> per_client_noise_stddev(double noise_multiplier, double clip_norm,
                                       std::uint64_t min_survivors) {
  if (!(noise_multiplier >= 0) || !std::isfinite(noise_multiplier)) {
    return fail(errc::invalid_argument, "noise multiplier " + std::to_string(noise_multiplier) +
                                            " is negative or not finite");
  }
  if (!(clip_norm > 0) || !std::isfinite(clip_norm)) {
    return fail(errc::invalid_argument,
                "clip norm " + std::to_string(clip_norm) + " is not positive and finite");
  }
  if (min_survivors == 0) {
    return fail(errc::invalid_argument, "at least one client must survive a round");
  }
  // Variances add: t survivors each with s² sum to t·s² = (z·C)².
  return noise_multiplier * clip_norm / std::sqrt(static_cast<double>(min_survivors));
}

}  // namespace fedcore::privacy
