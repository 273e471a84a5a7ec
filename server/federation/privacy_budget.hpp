// PrivacyBudget: the server's accounting of a DP run's (ε, δ) budget, with the RDP
// accountant of shared/privacy (Mironov et al. 2019, exact fractional orders).
//
// What one round spends depends on the DP mode:
//   record             every selected site runs DP-SGD: each local step Poisson-samples
//                      its records with q = batch / N and there are epochs · round(N/batch)
//                      steps per round. A site's guarantee is for its own records; the
//                      run's ε is the worst site's: the maximum over every (q, steps) shape
//                      seen so far of ε(shape, all rounds so far), as if each site took
//                      part in every round (q and steps are coupled, so they are never
//                      mixed across sites).
//   client_central,    one Gaussian step per round over clients, q = 1: the sample is a
//   client_distributed public, seeded shuffle, so no amplification by sampling is claimed.
// Each round attempt (a failed one too: its noise was drawn and used) composes another
// round. Before a round starts the controller asks what ε it would reach; a round that
// would pass the budget is not started (the run ends with the reason).
//
// The noise multiplier is the configured one or, when 0, the smallest that lets the
// planned rounds fit the budget (calibrated for the shape of the first round). A resumed run
// keeps the noise multiplier its rounds were charged at (store::DpCharge) and composes every
// past round with its own z and shapes, so a restart changes nothing of the accounting.
//
// Thread safety: none; the run controller's thread.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "server/federation/privacy_config.hpp"
#include "shared/util/error.hpp"

namespace fedcore::federation {

// The DP steps of one round.
struct DpRoundShape {
  double q = 1.0;  // sampling ratio of each step
  std::uint64_t steps_per_round = 1;
};

// Errors: invalid_argument when a record-level run meets a site with fewer records than
// one batch (q would exceed 1) or no sites.
result<DpRoundShape> dp_round_shape(const DpConfig& dp, std::int32_t local_epochs,
                                    std::int32_t batch_size, std::uint64_t smallest_site_samples);

class PrivacyBudget {
 public:
  // Errors: invalid_argument for a config without DP or a budget the planned rounds
  // cannot meet with any noise.
  static result<PrivacyBudget> create(const DpConfig& dp, std::int64_t planned_rounds,
                                      DpRoundShape first_round);
  // Calibrated for the worst of the first round's shapes (the largest z any needs).
  static result<PrivacyBudget> create(const DpConfig& dp, std::int64_t planned_rounds,
                                      std::span<const DpRoundShape> first_round);
  // A budget that charges its next rounds at `noise_multiplier` (a resumed run's: the z its
  // rounds were charged at). Errors: invalid_argument for a config without DP or z <= 0.
  static result<PrivacyBudget> with_noise_multiplier(const DpConfig& dp, double noise_multiplier);

  double noise_multiplier() const noexcept { return noise_multiplier_; }
  double epsilon_budget() const noexcept { return dp_.epsilon; }
  std::int64_t rounds_spent() const noexcept { return rounds_spent_; }

  // ε after one more round of `shape` (the worst over the shapes seen so far).
  result<double> epsilon_after_next(DpRoundShape shape) const;
  // The same for a round whose sites have these shapes (every selected site's: with
  // steps rounded per site, the smallest site is not always the worst).
  result<double> epsilon_after_next(std::span<const DpRoundShape> shapes) const;
  // Records that a round of `shape` ran (or was attempted); returns the ε now spent.
  result<double> spend(DpRoundShape shape);
  result<double> spend(std::span<const DpRoundShape> shapes);
  // For a resumed run: one attempt that already ran with these shapes at noise
  // multiplier `z` (the round's stored charge).
  void restore(std::span<const DpRoundShape> shapes, double z);

 private:
  PrivacyBudget(DpConfig dp, double noise_multiplier)
      : dp_(dp), noise_multiplier_(noise_multiplier) {}
  // ε of `shape` composed over every round counted in `rounds_at`.
  result<double> epsilon_for(DpRoundShape shape,
                             const std::vector<std::pair<double, std::int64_t>>& rounds_at) const;
  // ε after one more round at noise_multiplier_, worst over the shapes seen and `extra`.
  result<double> worst_epsilon_after_next(DpRoundShape extra) const;
  void remember(DpRoundShape shape);

  DpConfig dp_;
  double noise_multiplier_;
  std::int64_t rounds_spent_ = 0;
  std::vector<DpRoundShape> shapes_;                        // distinct shapes seen
  std::vector<std::pair<double, std::int64_t>> rounds_at_;  // (z, rounds charged at z)
};

}  // namespace fedcore::federation
