#include "shared/data/feature_stats.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "shared/util/assert.hpp"

namespace fedcore::data {
namespace {

bool consistent(const FeatureMoments& m) {
  return m.count.size() == m.sum.size() && m.sum_squares.size() == m.sum.size();
}

}  // namespace

FeatureMoments feature_moments(const Dataset& data) {
  const auto features = static_cast<std::size_t>(data.features.rows());
  FeatureMoments out;
  out.count.assign(features, static_cast<std::uint64_t>(data.features.cols()));
  out.sum.assign(features, 0.0);
  out.sum_squares.assign(features, 0.0);
  for (std::size_t f = 0; f < features; ++f) {
    // In double: float sums over thousands of samples lose the digits the variance needs.
    const Eigen::ArrayXd row = data.features.row(static_cast<Eigen::Index>(f)).cast<double>();
    out.sum[f] = row.sum();
    out.sum_squares[f] = row.square().sum();
  }
  return out;
}

result<FeatureMoments> combine_moments(std::span<const FeatureMoments> reports) {
  if (reports.empty()) {
    return fail(errc::invalid_argument, "feature statistics: no report to combine");
  }
  FeatureMoments total;
  const std::size_t features = reports.front().features();
  total.count.assign(features, 0);
  total.sum.assign(features, 0.0);
  total.sum_squares.assign(features, 0.0);
  for (const auto& report : reports) {
    if (!consistent(report)) {
      return fail(errc::invalid_argument,
                  "feature statistics: a report's counts, sums and sums of squares differ in "
                  "length");
    }
    if (report.features() != features) {
      return fail(errc::invalid_argument, "feature statistics: reports of " +
                                              std::to_string(features) + " and " +
                                              std::to_string(report.features()) + " features");
    }
    for (std::size_t f = 0; f < features; ++f) {
      total.count[f] += report.count[f];
      total.sum[f] += report.sum[f];
      total.sum_squares[f] += report.sum_squares[f];
    }
  }
  return total;
}

Standardizer FeatureScale::standardizer() const {
  FEDCORE_ASSERT(mean.size() == stddev.size(), "FeatureScale: one mean and one stddev each");
  Standardizer out;
  out.mean.resize(static_cast<Eigen::Index>(mean.size()));
  out.scale.resize(static_cast<Eigen::Index>(mean.size()));
  for (std::size_t f = 0; f < mean.size(); ++f) {
    out.mean[static_cast<Eigen::Index>(f)] = static_cast<float>(mean[f]);
    out.scale[static_cast<Eigen::Index>(f)] = static_cast<float>(stddev[f]);
  }
  return out;
}

result<FeatureScale> scale_from_moments(const FeatureMoments& total) {
  if (!consistent(total)) {
    return fail(errc::invalid_argument,
                "feature statistics: counts, sums and sums of squares differ in length");
  }
  FeatureScale out;
  out.mean.resize(total.features());
  out.stddev.resize(total.features());
  for (std::size_t f = 0; f < total.features(); ++f) {
    if (total.count[f] == 0) {
      return fail(errc::failed_precondition,
                  "feature statistics: feature " + std::to_string(f) + " has no value");
    }
    if (!std::isfinite(total.sum[f]) || !std::isfinite(total.sum_squares[f])) {
      return fail(errc::invalid_argument,
                  "feature statistics: feature " + std::to_string(f) + " has a non-finite sum");
    }
    const double n = static_cast<double>(total.count[f]);
    const double mean = total.sum[f] / n;
    // E[x²] − E[x]²: the only form sums allow; rounding may take it a hair below 0.
    const double variance = std::max(0.0, total.sum_squares[f] / n - mean * mean);
    out.mean[f] = mean;
    out.stddev[f] = standard_deviation_or_one(mean, std::sqrt(variance));
  }
  return out;
}

}  // namespace fedcore::data
