// Clipping, the Gaussian mechanism and the noise sources.
#include "shared/privacy/gaussian.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "shared/privacy/noise_source.hpp"

namespace fedcore::privacy {
namespace {

double l2(const std::vector<float>& v) {
  double s = 0;
  for (const float x : v) {
    s += static_cast<double>(x) * x;
  }
  return std::sqrt(s);
}

TEST(Clip, LeavesSmallUpdatesAlone) {
  std::vector<float> v = {3.0f, 4.0f};  // norm 5
  auto r = clip_l2(v, 5.0);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->norm, 5.0);
  EXPECT_FALSE(r->clipped);
  EXPECT_EQ(v, (std::vector<float>{3.0f, 4.0f}));
}

TEST(Clip, ScalesLargeUpdatesToTheBound) {
  std::vector<float> v = {30.0f, 40.0f, 0.0f};  // norm 50
  auto r = clip_l2(v, 5.0);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->norm, 50.0);
  EXPECT_TRUE(r->clipped);
  EXPECT_LE(l2(v), 5.0);
  EXPECT_NEAR(l2(v), 5.0, 1e-5);
  EXPECT_NEAR(v[0] / v[1], 0.75, 1e-6);  // direction kept
}

TEST(Clip, NeverExceedsTheBoundAfterRounding) {
  // Many coordinates with awkward values: the float result must still be within C.
  std::vector<float> v(100000);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(std::sin(static_cast<double>(i)) * 1.37 + 0.1);
  }
  auto r = clip_l2(v, 0.3);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->clipped);
  EXPECT_LE(l2(v), 0.3);
}

TEST(Clip, RefusesBadInput) {
  std::vector<float> v = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_EQ(clip_l2(v, 1.0).error().code, errc::invalid_argument);
  std::vector<float> w = {1.0f, 2.0f};
  EXPECT_EQ(clip_l2(w, 0.0).error().code, errc::invalid_argument);
  EXPECT_EQ(clip_l2(w, -1.0).error().code, errc::invalid_argument);
  EXPECT_EQ(w, (std::vector<float>{1.0f, 2.0f}));
}

// Mean and variance of n draws from `source`, checked against N(0, 1) with k standard
// errors: the mean's standard error is 1/√n, the sample variance's √(2/n).
void expect_standard_normal(NoiseSource& source, std::size_t n, double k) {
  std::vector<double> draws(n);
  ASSERT_TRUE(source.fill_standard_normal(draws));
  double sum = 0;
  double sum_sq = 0;
  for (const double x : draws) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sum_sq += x * x;
  }
  const double mean = sum / static_cast<double>(n);
  const double variance = sum_sq / static_cast<double>(n) - mean * mean;
  const double dn = static_cast<double>(n);
  EXPECT_LT(std::abs(mean), k / std::sqrt(dn)) << "mean " << mean;
  EXPECT_LT(std::abs(variance - 1), k * std::sqrt(2 / dn)) << "variance " << variance;
}

TEST(Noise, SeededNormalMoments) {
  // Deterministic: this seed's 1e6 draws sit within 4 standard errors (checked once; a
  // change to Rng that moves them out would be a real change in the stream).
  SeededNormal source(20240611);
  expect_standard_normal(source, 1'000'000, 4.0);
}

TEST(Noise, SeededNormalIsReproducible) {
  SeededNormal a(7);
  SeededNormal b(7);
  std::vector<double> x(100);
  std::vector<double> y(100);
  ASSERT_TRUE(a.fill_standard_normal(x));
  ASSERT_TRUE(b.fill_standard_normal(y));
  EXPECT_EQ(x, y);
}

TEST(Noise, CryptoNormalMoments) {
  // Not reproducible by design, so a loose 6-sigma bound: a correct source fails it with
  // probability about 4e-9 per check.
  CryptoNormal source;
  expect_standard_normal(source, 1'000'000, 6.0);
}

TEST(Noise, CryptoNormalTailsAndOddLengths) {
  CryptoNormal source;
  // Odd lengths and lengths that cross the refill boundary.
  for (const std::size_t n : {1u, 3u, 511u, 1025u}) {
    std::vector<double> draws(n, std::numeric_limits<double>::quiet_NaN());
    ASSERT_TRUE(source.fill_standard_normal(draws));
    for (const double x : draws) {
      EXPECT_TRUE(std::isfinite(x));
    }
  }
  // The fraction beyond 2 standard deviations is 4.55%; with 1e6 draws its standard error
  // is 0.0002, so 6 of them is 0.0013.
  std::vector<double> draws(1'000'000);
  ASSERT_TRUE(source.fill_standard_normal(draws));
  std::size_t beyond = 0;
  for (const double x : draws) {
    beyond += std::abs(x) > 2 ? 1 : 0;
  }
  EXPECT_NEAR(static_cast<double>(beyond) / 1e6, 0.0455, 0.0013);
}

TEST(GaussianMechanism, AddsNoiseOfTheRightScale) {
  // z = 1.5, C = 2: each coordinate gets N(0, 9).
  std::vector<float> v(1'000'000, 10.0f);
  SeededNormal source(99);
  ASSERT_TRUE(add_gaussian_noise(v, 1.5, 2.0, source));
  double sum = 0;
  double sum_sq = 0;
  for (const float x : v) {
    sum += x - 10.0;
    sum_sq += (x - 10.0) * (x - 10.0);
  }
  const double n = static_cast<double>(v.size());
  const double mean = sum / n;
  const double variance = sum_sq / n - mean * mean;
  EXPECT_LT(std::abs(mean), 4 * 3.0 / std::sqrt(n));
  EXPECT_LT(std::abs(variance / 9.0 - 1), 4 * std::sqrt(2 / n));
}

TEST(GaussianMechanism, ZeroNoiseMultiplierChangesNothing) {
  std::vector<float> v = {1.0f, -2.0f, 3.5f};
  SeededNormal source(1);
  ASSERT_TRUE(add_gaussian_noise(v, 0.0, 1.0, source));
  EXPECT_EQ(v, (std::vector<float>{1.0f, -2.0f, 3.5f}));
}

TEST(GaussianMechanism, RefusesBadParameters) {
  std::vector<float> v = {1.0f};
  SeededNormal source(1);
  EXPECT_EQ(add_gaussian_noise(v, -1.0, 1.0, source).error().code, errc::invalid_argument);
  EXPECT_EQ(add_gaussian_noise(v, 1.0, 0.0, source).error().code, errc::invalid_argument);
  EXPECT_EQ(add_gaussian_noise(v, std::nan(""), 1.0, source).error().code, errc::invalid_argument);
}

class FailingSource final : public NoiseSource {
 public:
  result<void> fill_standard_normal(std::span<double>) override {
    return fail(errc::unavailable, "no entropy");
  }
};

TEST(GaussianMechanism, NoiseFailureIsReported) {
  std::vector<float> v(10, 1.0f);
  FailingSource source;
  auto r = add_gaussian_noise(v, 1.0, 1.0, source);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::unavailable);
}

}  // namespace
}  // namespace fedcore::privacy
