#include "shared/privacy/adaptive_clip.hpp"

#include <cmath>
#include <string>

namespace fedcore::privacy {
namespace {

bool positive_finite(double x) noexcept {
  return x > 0 && std::isfinite(x);
}

}  // namespace

double unclipped_report(double update_norm, double clip_norm) noexcept {
  // A NaN norm compares false and counts as clipped (the conservative answer: it pushes
  // the clip up, never lets a bad update look typical).
  return update_norm <= clip_norm ? 0.5 : -0.5;
}

result<AdaptiveClip> AdaptiveClip::create(double clip, double target_quantile, double learning_rate,
                                          double count_stddev) {
  if (!positive_finite(clip)) {
    return fail(errc::invalid_argument,
                "initial clip " + std::to_string(clip) + " is not positive and finite");
  }
  if (!(target_quantile > 0 && target_quantile < 1)) {
    return fail(errc::invalid_argument,
                "target quantile " + std::to_string(target_quantile) + " is not in (0, 1)");
  }
  if (!positive_finite(learning_rate)) {
    return fail(errc::invalid_argument,
                "learning rate " + std::to_string(learning_rate) + " is not positive and finite");
  }
  if (!(count_stddev >= 0) || !std::isfinite(count_stddev)) {
    return fail(errc::invalid_argument, "count noise stddev " + std::to_string(count_stddev) +
                                            " is negative or not finite");
  }
  return AdaptiveClip(clip, target_quantile, learning_rate, count_stddev);
}

result<double> AdaptiveClip::update(double report_sum, double expected_clients,
                                    NoiseSource& noise) {
  if (!positive_finite(expected_clients)) {
    return fail(errc::invalid_argument, "expected clients " + std::to_string(expected_clients) +
                                            " is not positive and finite");
  }
  if (!std::isfinite(report_sum)) {
    return fail(errc::invalid_argument, "report sum is not finite");
  }
  double z = 0;
  if (auto ok = noise.fill_standard_normal(std::span<double>(&z, 1)); !ok) {
    return ok.error();
  }
  // Dividing by the EXPECTED count, not the number that answered: the latter would be a
  // second data-dependent quantity to noise.
  const double unclipped_fraction = (report_sum + count_stddev_ * z) / expected_clients + 0.5;
  return step(unclipped_fraction);
}

double AdaptiveClip::step(double unclipped_fraction) noexcept {
  // Geometric update: too many unclipped (b̄ > γ) means C is above the quantile, shrink.
  clip_ *= std::exp(-learning_rate_ * (unclipped_fraction - target_quantile_));
  return clip_;
}

result<double> update_noise_multiplier(double z, double count_stddev) {
  if (!positive_finite(z) || !positive_finite(count_stddev)) {
    return fail(errc::invalid_argument, "noise multiplier " + std::to_string(z) +
                                            " and count stddev " + std::to_string(count_stddev) +
                                            " must both be positive and finite");
  }
  const double under_root = 1 / (z * z) - 1 / (4 * count_stddev * count_stddev);
  if (!(under_root > 0)) {
    return fail(errc::invalid_argument,
                "count stddev " + std::to_string(count_stddev) +
                    " is too small for noise multiplier " + std::to_string(z) +
                    ": 2 * count stddev must exceed z, or the count alone spends the budget");
  }
  return 1 / std::sqrt(under_root);
}

}  // namespace fedcore::privacy
