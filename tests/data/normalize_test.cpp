#include "shared/data/normalize.hpp"

#include <array>
#include <cmath>

#include <gtest/gtest.h>

#include "shared/util/rng.hpp"

namespace fedcore::data {
namespace {

// Three features: N(5, 2^2), N(-100, 30^2), and the constant 7.
Dataset tabular(std::size_t count, std::uint64_t seed) {
  Rng rng(seed);
  Dataset data;
  data.features.resize(3, static_cast<Eigen::Index>(count));
  for (Eigen::Index j = 0; j < data.features.cols(); ++j) {
    data.features(0, j) = static_cast<float>(5.0 + 2.0 * rng.normal());
    data.features(1, j) = static_cast<float>(-100.0 + 30.0 * rng.normal());
    data.features(2, j) = 7.0f;
  }
  data.labels.assign(count, 0);
  data.num_classes = 1;
  data.sample_shape = {3};
  return data;
}

TEST(StandardizerTest, TrainHasZeroMeanUnitStd) {
  Dataset train = tabular(500, 1);
  const Standardizer standardizer = Standardizer::fit(train);
  EXPECT_NEAR(standardizer.mean[0], 5.0f, 0.3f);
  EXPECT_NEAR(standardizer.scale[1], 30.0f, 3.0f);
  standardizer.apply(train);
  for (Eigen::Index f = 0; f < 2; ++f) {
    const Eigen::ArrayXd row = train.features.row(f).cast<double>().transpose();
    const double mean = row.mean();
    const double stddev = std::sqrt((row - mean).square().mean());
    EXPECT_NEAR(mean, 0.0, 1e-5) << "feature " << f;
    EXPECT_NEAR(stddev, 1.0, 1e-4) << "feature " << f;
  }
}

TEST(StandardizerTest, ConstantFeatureIsSafe) {
  Dataset train = tabular(50, 2);
  const Standardizer standardizer = Standardizer::fit(train);
  EXPECT_FLOAT_EQ(standardizer.mean[2], 7.0f);
  EXPECT_FLOAT_EQ(standardizer.scale[2], 1.0f);
  standardizer.apply(train);
  EXPECT_TRUE(train.features.allFinite());
  EXPECT_TRUE((train.features.row(2).array() == 0.0f).all());
}

TEST(StandardizerTest, TestSetUsesTrainingStatistics) {
  Dataset train = tabular(200, 3);
  Dataset test = tabular(20, 4);
  const Dataset original = test;
  const Standardizer standardizer = Standardizer::fit(train);
  standardizer.apply(test);
  for (Eigen::Index f = 0; f < 3; ++f) {
    for (Eigen::Index j = 0; j < 20; ++j) {
      EXPECT_NEAR(test.features(f, j),
                  (original.features(f, j) - standardizer.mean[f]) / standardizer.scale[f], 1e-5f);
    }
  }
}

TEST(NormalizeMeanStdTest, PerChannelInHwc) {
  // Two 2x2 RGB images; value = sample * 100 + pixel * 10 + channel.
  Dataset data;
  data.sample_shape = {2, 2, 3};
  data.features.resize(12, 2);
  for (Eigen::Index s = 0; s < 2; ++s) {
    for (Eigen::Index p = 0; p < 4; ++p) {
      for (Eigen::Index c = 0; c < 3; ++c) {
        data.features(p * 3 + c, s) = static_cast<float>(s * 100 + p * 10 + c);
      }
    }
  }
  data.labels = {0, 0};
  data.num_classes = 1;
  const Dataset original = data;
  const std::array<float, 3> mean{1.0f, 2.0f, 3.0f};
  const std::array<float, 3> stddev{0.5f, 2.0f, 4.0f};
  normalize_mean_std(data, mean, stddev);
  for (Eigen::Index s = 0; s < 2; ++s) {
    for (Eigen::Index p = 0; p < 4; ++p) {
      for (Eigen::Index c = 0; c < 3; ++c) {
        const auto cc = static_cast<std::size_t>(c);
        EXPECT_FLOAT_EQ(data.features(p * 3 + c, s),
                        (original.features(p * 3 + c, s) - mean[cc]) / stddev[cc]);
      }
    }
  }
}

}  // namespace
}  // namespace fedcore::data
