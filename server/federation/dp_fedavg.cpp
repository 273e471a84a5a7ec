#include "server/federation/dp_fedavg.hpp"

#include <algorithm>

#include "shared/privacy/gaussian.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::federation {

DpFedAvg::DpFedAvg(std::size_t param_count, double clip_norm, double noise_multiplier,
                   std::unique_ptr<privacy::NoiseSource> noise,
                   std::optional<privacy::AdaptiveClip> adaptive)
    : sum_(param_count, 0.0),
      scratch_(param_count),
      clip_norm_(adaptive ? adaptive->clip() : clip_norm),
      noise_multiplier_(noise_multiplier),
      noise_(std::move(noise)),
      adaptive_(std::move(adaptive)) {
  FEDCORE_ASSERT(clip_norm > 0 && noise_multiplier >= 0, "DpFedAvg: clip > 0, noise >= 0");
  if (adaptive_ && noise_multiplier > 0) {
    auto z_update = privacy::update_noise_multiplier(noise_multiplier, adaptive_->count_stddev());
    FEDCORE_ASSERT(z_update.has_value(), "the run config checked 2 sigma_b > z");
    noise_multiplier_ = *z_update;
  }
}

void DpFedAvg::begin_round(std::span<const float> global, std::uint64_t) {
  global_.assign(global.begin(), global.end());
  std::fill(sum_.begin(), sum_.end(), 0.0);
  count_ = 0;
  clipped_ = 0;
  report_sum_ = 0;
  noise_failed_ = false;
}

void DpFedAvg::add_update(std::span<const float> update, std::uint64_t) {
  FEDCORE_ASSERT(update.size() == sum_.size(), "DpFedAvg: update of the wrong size");
  for (std::size_t i = 0; i < update.size(); ++i) {
    scratch_[i] = update[i] - global_[i];
  }
  // Validated updates are finite, so clipping cannot fail.
  auto clipped = privacy::clip_l2(scratch_, clip_norm_);
  FEDCORE_ASSERT(clipped.has_value(), "a validated update clips");
  clipped_ += clipped->clipped ? 1 : 0;
  report_sum_ += privacy::unclipped_report(clipped->norm, clip_norm_);
  for (std::size_t i = 0; i < scratch_.size(); ++i) {
    sum_[i] += scratch_[i];
  }
  ++count_;
}

std::vector<float> DpFedAvg::finish_round() {
  std::vector<float> noised(sum_.size());
  for (std::size_t i = 0; i < sum_.size(); ++i) {
    noised[i] = static_cast<float>(sum_[i]);
  }
  if (auto ok = privacy::add_gaussian_noise(noised, noise_multiplier_, clip_norm_, *noise_); !ok) {
    noise_failed_ = true;
    return global_;
  }
  // Divided by the number selected, public, not by the number that answered.
  const double divisor = double(std::max<std::size_t>(selected_, std::max<std::size_t>(count_, 1)));
  std::vector<float> next(global_);
  for (std::size_t i = 0; i < next.size(); ++i) {
    next[i] += static_cast<float>(double(noised[i]) / divisor);
  }
  if (adaptive_) {
    // The clip for the next round, from this round's noised count of unclipped updates.
    auto moved = adaptive_->update(report_sum_, divisor, *noise_);
    if (!moved) {
      noise_failed_ = true;
      return global_;
    }
    clip_norm_ = *moved;
  }
  return next;
}

}  // namespace fedcore::federation
