// Adaptive clipping (Andrew et al. 2021): the clip follows the target quantile from both
// sides, the step has the right sign, and the noise split is computed and refused right.
#include "shared/privacy/adaptive_clip.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "shared/privacy/noise_source.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::privacy {
namespace {

// 1000 update norms from a log-normal (log-mean 0, log-sd 1), fixed by the seed.
std::vector<double> lognormal_norms() {
  Rng rng(4242);
  std::vector<double> norms(1000);
  for (double& n : norms) {
    n = std::exp(rng.normal());
  }
  return norms;
}

// The smallest norm with at least a fraction γ of the norms <= it.
double empirical_quantile(std::vector<double> norms, double gamma) {
  std::sort(norms.begin(), norms.end());
  const auto k = static_cast<std::size_t>(std::ceil(gamma * static_cast<double>(norms.size())));
  return norms[k - 1];
}

double report_sum(const std::vector<double>& norms, double clip) {
  double sum = 0;
  for (const double n : norms) {
    sum += unclipped_report(n, clip);
  }
  return sum;
}

struct Case {
  double gamma;
  double start_factor;  // initial clip = factor × the true quantile
};

class AdaptiveClipConverges : public ::testing::TestWithParam<Case> {};

// From 100× above and 100× below the quantile, γ = 0.5 and 0.9, η = 0.2 and count noise
// σ_b = 1 (b̄ noise 0.001 with 1000 clients): within 1000 rounds the clip is within 5% of
// the empirical quantile. (The slowest case, γ = 0.9 from above, moves by η(1-γ) = 0.02 in
// log C per round until near: about 230 rounds, then contracts by ~3.5% per round.)
TEST_P(AdaptiveClipConverges, ToTheEmpiricalQuantile) {
  const auto norms = lognormal_norms();
  const double quantile = empirical_quantile(norms, GetParam().gamma);
  auto clip = AdaptiveClip::create(quantile * GetParam().start_factor, GetParam().gamma, 0.2, 1.0);
  ASSERT_TRUE(clip);
  SeededNormal noise(77);
  for (int round = 0; round < 1000; ++round) {
    ASSERT_TRUE(clip->update(report_sum(norms, clip->clip()), 1000.0, noise));
  }
  EXPECT_NEAR(clip->clip() / quantile, 1.0, 0.05)
      << "clip " << clip->clip() << " quantile " << quantile;
}

INSTANTIATE_TEST_SUITE_P(BothDirections, AdaptiveClipConverges,
                         ::testing::Values(Case{0.5, 100.0}, Case{0.5, 0.01}, Case{0.9, 100.0},
                                           Case{0.9, 0.01}));

TEST(AdaptiveClip, AllUnclippedShrinksTheClip) {
  // Every norm below C: every report is +1/2, b̄ = 1 > γ, so C must shrink by exp(-η(1-γ)).
  auto clip = AdaptiveClip::create(10.0, 0.5, 0.2, 0.0);
  ASSERT_TRUE(clip);
  const std::vector<double> norms = {1.0, 2.0, 3.0, 9.99};
  SeededNormal noise(1);
  auto c = clip->update(report_sum(norms, 10.0), 4.0, noise);
  ASSERT_TRUE(c);
  EXPECT_LT(*c, 10.0);
  EXPECT_DOUBLE_EQ(*c, 10.0 * std::exp(-0.2 * 0.5));
}

TEST(AdaptiveClip, AllClippedGrowsTheClip) {
  auto clip = AdaptiveClip::create(1.0, 0.9, 0.2, 0.0);
  ASSERT_TRUE(clip);
  const std::vector<double> norms = {1.5, 2.0, 3.0};
  SeededNormal noise(1);
  auto c = clip->update(report_sum(norms, 1.0), 3.0, noise);
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(*c, std::exp(0.2 * 0.9));
}

TEST(AdaptiveClip, ANormEqualToTheClipCountsAsUnclipped) {
  EXPECT_EQ(unclipped_report(2.0, 2.0), 0.5);
  EXPECT_EQ(unclipped_report(2.0000001, 2.0), -0.5);
  EXPECT_EQ(unclipped_report(std::nan(""), 2.0), -0.5);
}

TEST(AdaptiveClip, TheWrongSignDriftsAway) {
  // If clients reported +1/2 when CLIPPED, the update would push C away from the quantile:
  // from just above it, C keeps growing. This is what the sign convention prevents.
  const auto norms = lognormal_norms();
  const double quantile = empirical_quantile(norms, 0.5);
  auto clip = AdaptiveClip::create(quantile * 1.1, 0.5, 0.2, 0.0);
  ASSERT_TRUE(clip);
  SeededNormal noise(3);
  for (int round = 0; round < 200; ++round) {
    ASSERT_TRUE(clip->update(-report_sum(norms, clip->clip()), 1000.0, noise));
  }
  EXPECT_GT(clip->clip(), 10 * quantile);
}

TEST(AdaptiveClip, RefusesBadParameters) {
  EXPECT_EQ(AdaptiveClip::create(0.0, 0.5, 0.2, 1.0).error().code, errc::invalid_argument);
  EXPECT_EQ(AdaptiveClip::create(1.0, 1.0, 0.2, 1.0).error().code, errc::invalid_argument);
  EXPECT_EQ(AdaptiveClip::create(1.0, 0.0, 0.2, 1.0).error().code, errc::invalid_argument);
  EXPECT_EQ(AdaptiveClip::create(1.0, 0.5, 0.0, 1.0).error().code, errc::invalid_argument);
  EXPECT_EQ(AdaptiveClip::create(1.0, 0.5, 0.2, -1.0).error().code, errc::invalid_argument);
  auto clip = AdaptiveClip::create(1.0, 0.5, 0.2, 1.0);
  ASSERT_TRUE(clip);
  SeededNormal noise(1);
  EXPECT_EQ(clip->update(3.0, 0.0, noise).error().code, errc::invalid_argument);
  EXPECT_EQ(clip->clip(), 1.0);
}

TEST(UpdateNoiseMultiplier, SplitsTheBudget) {
  // z = 1, σ_b = 1: (1 - 1/4)^(-1/2) = 2/√3.
  auto z = update_noise_multiplier(1.0, 1.0);
  ASSERT_TRUE(z);
  EXPECT_DOUBLE_EQ(*z, 2.0 / std::sqrt(3.0));
  // The two queries together cost what z costs: z_Δ⁻² + (2σ_b)⁻² = z⁻².
  auto z2 = update_noise_multiplier(0.8, 25.0);
  ASSERT_TRUE(z2);
  EXPECT_NEAR(1 / (*z2 * *z2) + 1 / (50.0 * 50.0), 1 / 0.64, 1e-12);
  EXPECT_GT(*z2, 0.8);
}

TEST(UpdateNoiseMultiplier, RefusesACountThatSpendsTheBudget) {
  EXPECT_EQ(update_noise_multiplier(1.0, 0.5).error().code, errc::invalid_argument);  // 2σ_b = z
  EXPECT_EQ(update_noise_multiplier(1.0, 0.3).error().code, errc::invalid_argument);
  EXPECT_EQ(update_noise_multiplier(0.0, 1.0).error().code, errc::invalid_argument);
  EXPECT_EQ(update_noise_multiplier(1.0, 0.0).error().code, errc::invalid_argument);
}

}  // namespace
}  // namespace fedcore::privacy
