#include "shared/data/feature_stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

#include "shared/data/csv.hpp"
#include "shared/data/partition.hpp"
#include "shared/util/source_tree.hpp"

namespace fedcore::data {
namespace {

// Mean and population standard deviation of one feature, two passes in double: the
// reference the federated estimate must reproduce.
std::pair<double, double> pooled(const Dataset& d, Eigen::Index feature) {
  const Eigen::ArrayXd row = d.features.row(feature).cast<double>();
  const double mean = row.sum() / double(row.size());
  return {mean, std::sqrt((row - mean).square().sum() / double(row.size()))};
}

Dataset breast_cancer() {
  auto table = load_csv(fedcore::source_path("data/breast_cancer_wisconsin.csv"),
                        {.label_column = "benign"});
  EXPECT_TRUE(table) << table.error().to_string();
  return std::move(*table);
}

double tolerance(double reference) {
  return 1e-9 * std::max(1.0, std::abs(reference));
}

TEST(FeatureStatsTest, MomentsOfAHandMadeTable) {
  Dataset d;
  d.features.resize(2, 3);
  d.features << 1, 2, 3,  //
      -1, 0, 4;
  const auto m = feature_moments(d);
  ASSERT_EQ(m.features(), 2u);
  EXPECT_EQ(m.count, (std::vector<std::uint64_t>{3, 3}));
  EXPECT_EQ(m.sum, (std::vector<double>{6, 3}));
  EXPECT_EQ(m.sum_squares, (std::vector<double>{14, 17}));
  auto scale = scale_from_moments(m);
  ASSERT_TRUE(scale);
  EXPECT_DOUBLE_EQ(scale->mean[0], 2.0);
  EXPECT_DOUBLE_EQ(scale->stddev[0], std::sqrt(2.0 / 3.0));
  EXPECT_DOUBLE_EQ(scale->mean[1], 1.0);
  EXPECT_DOUBLE_EQ(scale->stddev[1], std::sqrt(14.0 / 3.0));
}

// Three non-IID sites (label skew, Dirichlet 0.3) of the breast-cancer table: the combined
// estimate is the pooled data's mean and standard deviation, feature by feature.
TEST(FeatureStatsTest, CombinedSitesEqualThePooledDataTo1e9) {
  const Dataset all = breast_cancer();
  const auto parts = partition_dirichlet(all.labels, all.num_classes, 3, 0.3, 5);
  std::vector<FeatureMoments> reports;
  std::vector<std::size_t> union_indices;
  for (const auto& part : parts) {
    reports.push_back(feature_moments(all.subset(part)));
    union_indices.insert(union_indices.end(), part.begin(), part.end());
  }
  ASSERT_EQ(union_indices.size(), all.size());
  auto total = combine_moments(reports);
  ASSERT_TRUE(total) << total.error().to_string();
  auto scale = scale_from_moments(*total);
  ASSERT_TRUE(scale) << scale.error().to_string();
  ASSERT_EQ(scale->features(), 30u);
  for (Eigen::Index f = 0; f < 30; ++f) {
    const auto [mean, stddev] = pooled(all, f);
    EXPECT_EQ(total->count[static_cast<std::size_t>(f)], all.size());
    EXPECT_NEAR(scale->mean[static_cast<std::size_t>(f)], mean, tolerance(mean)) << f;
    EXPECT_NEAR(scale->stddev[static_cast<std::size_t>(f)], stddev, tolerance(stddev)) << f;
  }
  // The float form standardises the pooled data to mean 0 and standard deviation 1.
  Dataset copy = all;
  scale->standardizer().apply(copy);
  for (Eigen::Index f = 0; f < 30; ++f) {
    const auto [mean, stddev] = pooled(copy, f);
    EXPECT_NEAR(mean, 0.0, 1e-5) << f;
    EXPECT_NEAR(stddev, 1.0, 1e-5) << f;
  }
}

TEST(FeatureStatsTest, ConstantFeatureGetsScaleOneAndStandardisesToZero) {
  Dataset d;
  d.features.resize(2, 4);
  // A constant feature far from 0: rounding in E[x²] - E[x]² must not give a tiny or
  // negative variance that blows the feature up.
  d.features << 1e6f + 0.25f, 1e6f + 0.25f, 1e6f + 0.25f, 1e6f + 0.25f,  //
      3, 3, 3, 3;
  auto scale = scale_from_moments(feature_moments(d));
  ASSERT_TRUE(scale);
  EXPECT_DOUBLE_EQ(scale->mean[0], 1e6 + 0.25);
  EXPECT_EQ(scale->stddev[0], 1.0);
  EXPECT_EQ(scale->mean[1], 3.0);
  EXPECT_EQ(scale->stddev[1], 1.0);
  scale->standardizer().apply(d);
  EXPECT_TRUE((d.features.array() == 0.0f).all());
  // The same rule as a site-local fit.
  EXPECT_EQ(standard_deviation_or_one(5.0, 1e-7), 1.0);
  EXPECT_EQ(standard_deviation_or_one(5.0, 0.5), 0.5);
  EXPECT_EQ(standard_deviation_or_one(5.0, std::nan("")), 1.0);
}

TEST(FeatureStatsTest, CombiningRefusesMismatchedReports) {
  FeatureMoments a{{2, 2}, {1, 2}, {1, 4}};
  FeatureMoments b{{2}, {1}, {1}};
  auto mixed = combine_moments(std::vector{a, b});
  ASSERT_FALSE(mixed);
  EXPECT_EQ(mixed.error().code, errc::invalid_argument);
  EXPECT_NE(mixed.error().message.find("2 and 1 features"), std::string::npos)
      << mixed.error().message;

  FeatureMoments ragged{{2, 2}, {1}, {1, 4}};
  auto bad = combine_moments(std::vector{ragged});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, errc::invalid_argument);
  auto none = combine_moments({});
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, errc::invalid_argument);
}

TEST(FeatureStatsTest, ScaleRefusesAFeatureWithoutValues) {
  auto empty = scale_from_moments(FeatureMoments{{3, 0}, {3, 0}, {5, 0}});
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, errc::failed_precondition);
  EXPECT_NE(empty.error().message.find("feature 1"), std::string::npos);
  auto infinite = scale_from_moments(FeatureMoments{{3}, {HUGE_VAL}, {5}});
  ASSERT_FALSE(infinite);
  EXPECT_EQ(infinite.error().code, errc::invalid_argument);
}

}  // namespace
}  // namespace fedcore::data
