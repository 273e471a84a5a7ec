// Adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy 2021, "Differentially Private
// Learning with Adaptive Clipping"): the clip norm C follows a target quantile γ of the
// clients' update norms, privately.
//
// Each round every participating client reports one bit, b_i = 1 if its update norm is
// <= C (its update was NOT clipped), else 0, sent CENTERED as b_i - 1/2 ∈ {+1/2, -1/2}
// (`unclipped_report`), as in the paper and tensorflow_privacy's QuantileEstimatorQuery:
// adding or removing one client then moves the sum by at most 1/2, not 1. The server
// sums the reports, adds N(0, σ_b²) noise, and recovers the unclipped fraction
//     b̄ = (Σ_i (b_i - 1/2) + N(0, σ_b²)) / expected_clients + 1/2
// then moves C geometrically:
//     C ← C · exp(-η (b̄ - γ))
// If more than a fraction γ of updates went unclipped (b̄ > γ) the clip is above the
// γ-quantile and shrinks; if fewer, it grows. The fixed point is the γ-quantile.
//
// Privacy: the report sum is a second Gaussian query per round, sensitivity 1/2, noise
// σ_b, i.e. noise multiplier 2σ_b. The paper charges both queries to one budget by
// noising the update sum with the smaller multiplier z_Δ = (z⁻² - (2σ_b)⁻²)^(-1/2)
// (`update_noise_multiplier`), so that the pair costs what a single Gaussian query with
// multiplier z costs: account the run with z. (The 2 in 2σ_b is the centering; with
// uncentered 0/1 bits it would be σ_b.)
//
// Thread safety: none; the state belongs to the server's run.
#pragma once

#include <cstdint>

#include "shared/privacy/noise_source.hpp"
#include "shared/util/error.hpp"

namespace fedcore::privacy {

// The centered bit a client reports: +1/2 if update_norm <= clip_norm (unclipped),
// else -1/2.
double unclipped_report(double update_norm, double clip_norm) noexcept;

class AdaptiveClip {
 public:
  // Errors: invalid_argument unless clip > 0, 0 < target_quantile < 1, learning_rate > 0
  // and count_stddev >= 0, all finite.
  static result<AdaptiveClip> create(double clip, double target_quantile, double learning_rate,
                                     double count_stddev);

  double clip() const noexcept { return clip_; }
  double target_quantile() const noexcept { return target_quantile_; }
  double learning_rate() const noexcept { return learning_rate_; }
  double count_stddev() const noexcept { return count_stddev_; }

  // One round: noises `report_sum` (the sum of the clients' unclipped_report values)
  // with N(0, σ_b²) from `noise`, forms b̄ = noised / expected_clients + 1/2 and applies
  // `step`. Returns the new clip.
  // Errors: invalid_argument if expected_clients is not positive and finite or report_sum
  // is not finite; the noise source's error (the clip is then unchanged).
  result<double> update(double report_sum, double expected_clients, NoiseSource& noise);

  // The deterministic part: C ← C·exp(-η (unclipped_fraction - γ)), returns the new C.
  // `unclipped_fraction` is b̄, already noised (it may lie outside [0, 1]).
  double step(double unclipped_fraction) noexcept;

 private:
  AdaptiveClip(double clip, double target_quantile, double learning_rate, double count_stddev)
      : clip_(clip),
        target_quantile_(target_quantile),
        learning_rate_(learning_rate),
        count_stddev_(count_stddev) {}

  double clip_;
  double target_quantile_;
  double learning_rate_;
  double count_stddev_;
};

// The noise multiplier for the update sum when the same round also releases the noised
// bit count with standard deviation count_stddev, such that both together cost what one
// Gaussian query with multiplier z costs: (z⁻² - (2σ_b)⁻²)^(-1/2).
// Errors: invalid_argument if z or count_stddev is not positive and finite, or if
// 2·count_stddev <= z (the count alone would then use up the whole budget: the term under
// the root is not positive).
result<double> update_noise_multiplier(double z, double count_stddev);

}  // namespace fedcore::privacy
