// Feature scaling applied after loading.
//
// Standardizer: per-feature standardisation for tabular data, x' = (x - mean) / scale,
// with mean and scale (the population standard deviation) fitted on the training set and
// then applied unchanged to training and test sets, so no test statistics leak in.
//
// normalize_mean_std: per-channel normalisation for HWC images whose pixels the loaders
// have already scaled to [0, 1] (e.g. CIFAR-10's mean {0.4914, 0.4822, 0.4465}).
#pragma once

#include <span>

#include "shared/data/dataset.hpp"
#include "shared/util/eigen.hpp"

namespace fedcore::data {

struct Standardizer {
  Eigen::VectorXf mean;   // one entry per feature (row of Dataset::features)
  Eigen::VectorXf scale;  // standard deviation; 1 for (near-)constant features

  // Per-feature mean and population standard deviation of `data`, accumulated in double;
  // a constant feature gets scale 1 (standard_deviation_or_one), so applying never
  // divides by zero. REQUIRES: data.size() > 0.
  static Standardizer fit(const Dataset& data);

  // Standardises data.features in place. REQUIRES: data.sample_size() == mean.size().
  void apply(Dataset& data) const;
};

// The scale of a feature with this mean and population standard deviation: `stddev`, or
// 1 when it is at most 1e-6 * max(1, |mean|) (a constant feature, up to rounding) or not a
// number. Shared by Standardizer::fit and the federated estimate (feature_stats.hpp).
double standard_deviation_or_one(double mean, double stddev) noexcept;

// For each pixel of channel c: x' = (x - channel_mean[c]) / channel_std[c].
// REQUIRES: data.sample_shape is {H, W, C}; both spans have C entries; every std > 0.
void normalize_mean_std(Dataset& data, std::span<const float> channel_mean,
                        std::span<const float> channel_std);

}  // namespace fedcore::data
