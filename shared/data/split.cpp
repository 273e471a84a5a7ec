#include "shared/data/split.hpp"

#include <algorithm>
#include <cmath>

#include "shared/util/assert.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::data {

SplitIndices stratified_split_indices(std::span<const std::int32_t> labels,
                                      std::int32_t num_classes, double test_fraction,
                                      std::uint64_t seed) {
  FEDCORE_ASSERT(test_fraction >= 0.0 && test_fraction <= 1.0,
                 "stratified_split: test_fraction must be in [0, 1]");
  FEDCORE_ASSERT(num_classes >= 0, "stratified_split: negative num_classes");
  std::vector<std::vector<std::size_t>> by_class(static_cast<std::size_t>(num_classes));
  for (std::size_t i = 0; i < labels.size(); ++i) {
    FEDCORE_ASSERT(labels[i] >= 0 && labels[i] < num_classes,
                   "stratified_split: label out of range");
    by_class[static_cast<std::size_t>(labels[i])].push_back(i);
  }
  Rng rng(seed);
  SplitIndices out;
  for (auto& members : by_class) {
    rng.shuffle(std::span(members));
    const auto take =
        static_cast<std::size_t>(std::llround(test_fraction * static_cast<double>(members.size())));
    out.test.insert(out.test.end(), members.begin(), members.begin() + take);
    out.train.insert(out.train.end(), members.begin() + take, members.end());
  }
  // Original order, so the training loop's own seeded shuffle is the only thing that
  // decides sample order.
  std::sort(out.train.begin(), out.train.end());
  std::sort(out.test.begin(), out.test.end());
  return out;
}

Split stratified_split(const Dataset& data, double test_fraction, std::uint64_t seed) {
  const SplitIndices indices =
      stratified_split_indices(data.labels, data.num_classes, test_fraction, seed);
  return Split{data.subset(indices.train), data.subset(indices.test)};
}

}  // namespace fedcore::data
