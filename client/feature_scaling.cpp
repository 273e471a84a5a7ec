#include "client/feature_scaling.hpp"

#include <string>

#include "shared/data/feature_stats.hpp"
#include "shared/data/normalize.hpp"

namespace fedcore::client {
namespace {

std::optional<error> require_tabular(const data::Dataset& d, std::size_t features) {
  if (d.sample_shape.size() != 1) {
    return fail(errc::failed_precondition,
                "feature scaling needs tabular data (one dimension per sample); this site's "
                "samples have " +
                    std::to_string(d.sample_shape.size()) + " dimensions");
  }
  if (features != d.sample_size()) {
    return fail(errc::failed_precondition, "the run expects " + std::to_string(features) +
                                               " features, this site's data has " +
                                               std::to_string(d.sample_size()));
  }
  return std::nullopt;
}

}  // namespace

result<data::TrainTest> scaled_copy(const protocol::FeatureScaling& scaling,
                                    const data::TrainTest& data) {
  data::TrainTest out = data;
  if (scaling.mode == protocol::ScalingMode::none) {
    return out;
  }
  data::Standardizer standardizer;
  if (scaling.mode == protocol::ScalingMode::site) {
    if (auto refused = require_tabular(data.train, data.train.sample_size())) {
      return *refused;
    }
    // The training split's statistics only: the test split stays unseen until evaluated.
    standardizer = data::Standardizer::fit(data.train);
  } else {
    if (auto refused = require_tabular(data.train, scaling.mean.size())) {
      return *refused;
    }
    standardizer = data::FeatureScale{scaling.mean, scaling.stddev}.standardizer();
  }
  standardizer.apply(out.train);
  if (out.test.size() > 0) {
    standardizer.apply(out.test);
  }
  return out;
}

result<protocol::FeatureStatsReport> feature_stats_report(
    const protocol::FeatureStatsRequest& request, const data::Dataset& train) {
  if (auto refused = require_tabular(train, request.features)) {
    return *refused;
  }
  const auto moments = data::feature_moments(train);
  protocol::FeatureStatsReport out;
  out.run_id = request.run_id;
  out.nonce = request.nonce;
  out.features = request.features;
  out.count = moments.count;
  out.sum = moments.sum;
  out.sum_squares = moments.sum_squares;
  return out;
}

bool shares_feature_statistics(const SitePolicy& policy) noexcept {
  return !policy.require_secure_aggregation && !policy.max_epsilon.has_value();
}

}  // namespace fedcore::client
