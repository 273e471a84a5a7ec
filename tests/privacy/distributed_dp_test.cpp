// Distributed DP sizing: t survivors' noise sums to the central noise z·C.
#include "shared/privacy/distributed_dp.hpp"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "shared/privacy/noise_source.hpp"

namespace fedcore::privacy {
namespace {

TEST(DistributedDp, PerClientStddev) {
  EXPECT_DOUBLE_EQ(*per_client_noise_stddev(1.0, 2.0, 4), 1.0);
  EXPECT_DOUBLE_EQ(*per_client_noise_stddev(1.1, 0.5, 100), 0.055);
  EXPECT_DOUBLE_EQ(*per_client_noise_stddev(0.7, 3.0, 1), 2.1);
  EXPECT_EQ(*per_client_noise_stddev(0.0, 3.0, 5), 0.0);
}

TEST(DistributedDp, SurvivorsNoiseAddsUpToTheTarget) {
  // t = 9 clients each add N(0, s²); the sum's variance over 200000 trials is (z·C)² = 4
  // (z = 1, C = 2), within 4 standard errors (√(2/n) relative).
  const double s = *per_client_noise_stddev(1.0, 2.0, 9);
  SeededNormal noise(5);
  const int trials = 200000;
  std::vector<double> draws(9);
  double sum_sq = 0;
  for (int i = 0; i < trials; ++i) {
    ASSERT_TRUE(noise.fill_standard_normal(draws));
    double total = 0;
    for (const double d : draws) {
      total += s * d;
    }
    sum_sq += total * total;
  }
  EXPECT_NEAR(sum_sq / trials / 4.0, 1.0, 4 * std::sqrt(2.0 / trials));
  // More survivors than t only add noise: 12 clients give variance 12 s² >= 4.
  EXPECT_GE(12 * s * s, 4.0);
}

TEST(DistributedDp, RefusesBadInput) {
  EXPECT_EQ(per_client_noise_stddev(1.0, 1.0, 0).error().code, errc::invalid_argument);
  EXPECT_EQ(per_client_noise_stddev(-1.0, 1.0, 3).error().code, errc::invalid_argument);
  EXPECT_EQ(per_client_noise_stddev(1.0, 0.0, 3).error().code, errc::invalid_argument);
}

}  // namespace
}  // namespace fedcore::privacy
