#include "shared/data/dataset.hpp"

#include "shared/util/assert.hpp"

namespace fedcore::data {

Dataset Dataset::subset(std::span<const std::size_t> indices) const {
  Dataset out;
  out.features.resize(features.rows(), static_cast<Eigen::Index>(indices.size()));
  out.labels.reserve(indices.size());
  for (std::size_t j = 0; j < indices.size(); ++j) {
    FEDCORE_ASSERT(indices[j] < size(), "Dataset::subset: index out of range");
    out.features.col(static_cast<Eigen::Index>(j)) =
        features.col(static_cast<Eigen::Index>(indices[j]));
    out.labels.push_back(labels[indices[j]]);
  }
  out.sample_shape = sample_shape;
  out.num_classes = num_classes;
  out.class_names = class_names;
  out.feature_names = feature_names;
  return out;
}

std::vector<std::size_t> Dataset::label_counts() const {
  std::vector<std::size_t> counts(static_cast<std::size_t>(num_classes), 0);
  for (auto label : labels) {
    FEDCORE_ASSERT(label >= 0 && label < num_classes, "label out of range");
    ++counts[static_cast<std::size_t>(label)];
  }
  return counts;
}

}  // namespace fedcore::data
