#include "shared/data/split.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace fedcore::data {
namespace {

// Classes of 50, 30 and 20 samples, interleaved; each sample's one feature is its index,
// so a subset reveals which samples it took.
Dataset three_classes() {
  Dataset data;
  const std::vector<std::size_t> sizes{50, 30, 20};
  std::vector<std::size_t> left = sizes;
  while (left[0] + left[1] + left[2] > 0) {
    for (std::int32_t k = 0; k < 3; ++k) {
      if (left[static_cast<std::size_t>(k)] > 0) {
        --left[static_cast<std::size_t>(k)];
        data.labels.push_back(k);
      }
    }
  }
  data.features.resize(1, static_cast<Eigen::Index>(data.labels.size()));
  for (Eigen::Index i = 0; i < data.features.cols(); ++i) {
    data.features(0, i) = static_cast<float>(i);
  }
  data.num_classes = 3;
  data.class_names = {"a", "b", "c"};
  data.sample_shape = {1};
  return data;
}

std::vector<std::size_t> ids(const Dataset& part) {
  std::vector<std::size_t> out;
  for (Eigen::Index i = 0; i < part.features.cols(); ++i) {
    out.push_back(static_cast<std::size_t>(part.features(0, i)));
  }
  return out;
}

TEST(StratifiedSplitTest, PreservesClassProportions) {
  const Dataset data = three_classes();
  const Split split = stratified_split(data, 0.25, 7);
  const auto all = data.label_counts();
  const auto test = split.test.label_counts();
  const auto train = split.train.label_counts();
  for (std::size_t k = 0; k < 3; ++k) {
    const double expected = 0.25 * static_cast<double>(all[k]);
    EXPECT_LE(std::abs(static_cast<double>(test[k]) - expected), 1.0) << "class " << k;
    EXPECT_EQ(train[k] + test[k], all[k]);
  }
  EXPECT_EQ(test, (std::vector<std::size_t>{13, 8, 5}));  // round(12.5)=13, round(7.5)=8
}

TEST(StratifiedSplitTest, DisjointAndCovering) {
  const Dataset data = three_classes();
  const Split split = stratified_split(data, 0.3, 11);
  std::vector<std::size_t> seen = ids(split.train);
  const auto test_ids = ids(split.test);
  seen.insert(seen.end(), test_ids.begin(), test_ids.end());
  std::sort(seen.begin(), seen.end());
  ASSERT_EQ(seen.size(), data.size());
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i], i);
  }
  // Labels travel with their samples.
  for (std::size_t j = 0; j < split.test.size(); ++j) {
    EXPECT_EQ(split.test.labels[j], data.labels[test_ids[j]]);
  }
  EXPECT_EQ(split.test.class_names, data.class_names);
  EXPECT_EQ(split.train.sample_shape, data.sample_shape);
  EXPECT_EQ(split.train.num_classes, 3);
}

TEST(StratifiedSplitTest, DeterministicForSeed) {
  const Dataset data = three_classes();
  EXPECT_EQ(ids(stratified_split(data, 0.2, 42).test), ids(stratified_split(data, 0.2, 42).test));
  EXPECT_NE(ids(stratified_split(data, 0.2, 42).test), ids(stratified_split(data, 0.2, 43).test));
}

TEST(StratifiedSplitTest, ExtremeFractions) {
  const Dataset data = three_classes();
  EXPECT_EQ(stratified_split(data, 0.0, 1).test.size(), 0u);
  EXPECT_EQ(stratified_split(data, 1.0, 1).train.size(), 0u);
  const SplitIndices indices = stratified_split_indices(data.labels, 3, 0.5, 1);
  EXPECT_TRUE(std::is_sorted(indices.train.begin(), indices.train.end()));
  EXPECT_TRUE(std::is_sorted(indices.test.begin(), indices.test.end()));
}

}  // namespace
}  // namespace fedcore::data
