// DP-FedAvg with central noise (McMahan, Ramage, Talwar, Zhang 2018): the server clips
// each client's update (trained - global) to L2 norm C, sums the clipped updates with
// equal weight, adds N(0, (z·C)²) per coordinate to the sum from a cryptographic source
// (shared/privacy/noise_source.hpp) and divides by the number of clients selected for the
// round (a public number, so one client's presence changes the sum by at most C).
// Sample counts do not weigh updates: a weight would let one client move the mean by
// more than C / n.
//
// The clip is fixed, or adaptive (Andrew et al. 2021, shared/privacy/adaptive_clip.hpp):
// each round the fraction of updates that were not clipped, noised, moves C towards the
// target quantile of update norms, and the noise multiplier on the updates is raised to
// pay for that count (update_noise_multiplier).
//
// Thread safety: none; the run controller's thread.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "server/federation/aggregate.hpp"
#include "shared/privacy/adaptive_clip.hpp"
#include "shared/privacy/noise_source.hpp"

namespace fedcore::federation {

class DpFedAvg final : public Strategy {
 public:
  // `noise` is CryptoNormal in production. `noise_multiplier` is the one the run is
  // accounted with; with `adaptive` the updates get the smaller z_Δ that leaves room for
  // the noised count. REQUIRES: clip_norm > 0, noise_multiplier >= 0, and with adaptive
  // clipping 2·count_stddev > noise_multiplier (checked by the run config).
  DpFedAvg(std::size_t param_count, double clip_norm, double noise_multiplier,
           std::unique_ptr<privacy::NoiseSource> noise,
           std::optional<privacy::AdaptiveClip> adaptive = std::nullopt);

  std::string_view name() const noexcept override { return "dp-fedavg"; }
  void begin_round(std::span<const float> global, std::uint64_t max_total_weight) override;
  void expect_clients(std::size_t selected) override { selected_ = selected; }
  void add_update(std::span<const float> update, std::uint64_t samples) override;
  std::size_t updates() const noexcept override { return count_; }
  std::vector<float> finish_round() override;

  double clip_norm() const noexcept { return clip_norm_; }
  std::size_t clipped_last_round() const noexcept { return clipped_; }
  // A noise source failure in finish_round (then the round must not be committed: the
  // returned model is the unchanged global one).
  bool noise_failed() const noexcept { return noise_failed_; }

 private:
  std::vector<float> global_;
  std::vector<double> sum_;
  std::vector<float> scratch_;
  double clip_norm_;
  double noise_multiplier_;  // on the update sum
  std::unique_ptr<privacy::NoiseSource> noise_;
  std::optional<privacy::AdaptiveClip> adaptive_;
  double report_sum_ = 0;  // adaptive: sum of the centred "not clipped" bits
  std::size_t selected_ = 0;
  std::size_t count_ = 0;
  std::size_t clipped_ = 0;
  bool noise_failed_ = false;
};

}  // namespace fedcore::federation
