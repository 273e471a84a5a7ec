// Feature statistics for one feature scale shared by a federation's sites.
//
// Each site reports the moments of its training split's features (FeatureMoments: per
// feature, how many values it holds, their sum and their sum of squares); the server adds
// the reports (combine_moments) and turns the totals into one mean and standard deviation
// per feature (scale_from_moments), which every site then applies to both of its splits
// (FeatureScale::standardizer). A sum of the sites' sums is the sum over the pooled data,
// so the federated mean and population standard deviation are those of the union of the
// sites' training splits, up to rounding; no site's raw values are needed.
//
// Rounding: moments accumulate in double, and the variance is E[x²] − E[x]², which loses
// about log10(mean² / variance) of double's 16 significant digits: a feature whose mean is
// 10⁴ times its standard deviation keeps about 8 (the breast-cancer features lose at most
// two). A variance that rounding makes slightly negative is taken as 0.
//
// Thread safety: pure functions over their arguments.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shared/data/dataset.hpp"
#include "shared/data/normalize.hpp"
#include "shared/util/error.hpp"

namespace fedcore::data {

struct FeatureMoments {
  std::vector<std::uint64_t> count;  // values of each feature
  std::vector<double> sum;           // Σ x per feature
  std::vector<double> sum_squares;   // Σ x² per feature

  std::size_t features() const noexcept { return sum.size(); }
};

// The moments of every feature (row of data.features) over all samples, in double. A data
// set without samples gives zero counts and sums.
FeatureMoments feature_moments(const Dataset& data);

// Element-wise totals of the reports. Errors: invalid_argument when there is no report,
// when a report's three vectors differ in length, or when two reports differ in feature
// count (naming both counts).
result<FeatureMoments> combine_moments(std::span<const FeatureMoments> reports);

// One scale for every feature: x' = (x - mean) / stddev.
struct FeatureScale {
  std::vector<double> mean;
  std::vector<double> stddev;  // population standard deviation; 1 for a constant feature

  std::size_t features() const noexcept { return mean.size(); }
  // The same in float, to apply to data sets. REQUIRES: mean.size() == stddev.size().
  Standardizer standardizer() const;
};

// Mean and population standard deviation per feature from totals; a constant feature
// (standard_deviation_or_one in normalize.hpp) gets stddev 1. Errors: invalid_argument for
// vectors of different lengths or a non-finite sum; failed_precondition naming the first
// feature without any value (count 0).
result<FeatureScale> scale_from_moments(const FeatureMoments& total);

}  // namespace fedcore::data
