// Dataset: labelled samples held as one column-major float matrix.
//
// `features` is sample_size x count, one column per sample (the same orientation as the
// model's activations, so a batch is a gather of columns). `sample_shape` says how to
// read a column: {H, W, C} (HWC) for images, {features} for tabular rows.
//
// Thread safety: a const Dataset may be shared by any number of readers.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shared/util/eigen.hpp"

namespace fedcore::data {

struct Dataset {
  Eigen::MatrixXf features;          // sample_size x count
  std::vector<std::int32_t> labels;  // count entries in [0, num_classes)
  std::vector<std::int64_t> sample_shape;
  std::int32_t num_classes = 0;
  std::vector<std::string> class_names;    // optional, num_classes entries when present
  std::vector<std::string> feature_names;  // optional (tabular data)

  std::size_t size() const noexcept { return labels.size(); }
  std::size_t sample_size() const noexcept { return static_cast<std::size_t>(features.rows()); }

  // The samples at `indices`, in that order. REQUIRES: every index < size().
  Dataset subset(std::span<const std::size_t> indices) const;
  // Number of samples per class (num_classes entries).
  std::vector<std::size_t> label_counts() const;
};

// A data set's standard training and test parts.
struct TrainTest {
  Dataset train;
  Dataset test;
};

}  // namespace fedcore::data
