#include "shared/privacy/distributed_dp.hpp"

#include <algorithm>
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

result<ClipReportSlot> clip_report_slot(double count_stddev, bool distributed,
                                        std::uint64_t min_survivors, double clip_range) {
  if (!(clip_range > 0) || !std::isfinite(clip_range)) {
    return fail(errc::invalid_argument,
                "clip range " + std::to_string(clip_range) + " is not positive and finite");
  }
  if (!(count_stddev > 0)) {
    return fail(errc::invalid_argument, "adaptive clipping needs a positive count_stddev");
  }
  ClipReportSlot slot;
  if (distributed) {
    // The count's noise has "clip norm" 1 here: the shares sum to N(0, count_stddev²).
    auto share = per_client_noise_stddev(count_stddev, 1.0, min_survivors);
    if (!share) {
      return share.error();
    }
    slot.share_stddev = *share;
  } else if (!std::isfinite(count_stddev)) {
    return fail(errc::invalid_argument, "count_stddev is not finite");
  }
  slot.scale = std::max(1.0, (0.5 + 8 * slot.share_stddev) / clip_range);
  return slot;
}

}  // namespace fedcore::privacy
