#include "shared/data/normalize.hpp"

#include <algorithm>
#include <cmath>

#include "shared/util/assert.hpp"

namespace fedcore::data {

Standardizer Standardizer::fit(const Dataset& data) {
  FEDCORE_ASSERT(data.size() > 0, "Standardizer::fit needs at least one sample");
  const Eigen::Index features = data.features.rows();
  const auto count = static_cast<double>(data.features.cols());
  Standardizer out;
  out.mean.resize(features);
  out.scale.resize(features);
  // Two passes in double: float sums over tens of thousands of samples lose digits, and the
  // one-pass E[x^2] - E[x]^2 formula cancels badly for large means.
  for (Eigen::Index f = 0; f < features; ++f) {
    const auto row = data.features.row(f).cast<double>();
    const double mean = row.sum() / count;
    const double variance = (row.array() - mean).square().sum() / count;
    out.mean[f] = static_cast<float>(mean);
    out.scale[f] = static_cast<float>(standard_deviation_or_one(mean, std::sqrt(variance)));
  }
  return out;
}

double standard_deviation_or_one(double mean, double stddev) noexcept {
  const bool constant = !(stddev > 1e-6 * std::max(1.0, std::abs(mean)));
  return constant ? 1.0 : stddev;
}

void Standardizer::apply(Dataset& data) const {
  FEDCORE_ASSERT(data.features.rows() == mean.size() && mean.size() == scale.size(),
                 "Standardizer::apply: feature count differs from the fitted one");
  data.features = ((data.features.colwise() - mean).array().colwise() / scale.array()).matrix();
}

void normalize_mean_std(Dataset& data, std::span<const float> channel_mean,
                        std::span<const float> channel_std) {
  FEDCORE_ASSERT(data.sample_shape.size() == 3, "normalize_mean_std needs HWC images");
  const auto channels = static_cast<std::size_t>(data.sample_shape[2]);
  FEDCORE_ASSERT(channel_mean.size() == channels && channel_std.size() == channels,
                 "normalize_mean_std: one mean and one std per channel");
  FEDCORE_ASSERT(std::all_of(channel_std.begin(), channel_std.end(), [](float s) { return s > 0; }),
                 "normalize_mean_std: standard deviations must be positive");
  FEDCORE_ASSERT(data.features.size() % static_cast<Eigen::Index>(channels) == 0,
                 "normalize_mean_std: features do not hold whole pixels");
  const auto c = static_cast<Eigen::Index>(channels);
  // In HWC the channel is the fastest-moving index, so viewing the whole matrix as
  // C x (pixels of all samples) puts each channel on one row.
  Eigen::Map<Eigen::MatrixXf> pixels(data.features.data(), c, data.features.size() / c);
  const Eigen::Map<const Eigen::VectorXf> mean(channel_mean.data(), c);
  const Eigen::Map<const Eigen::ArrayXf> stddev(channel_std.data(), c);
  pixels = ((pixels.colwise() - mean).array().colwise() / stddev).matrix();
}

}  // namespace fedcore::data
