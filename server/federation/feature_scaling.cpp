#include "server/federation/feature_scaling.hpp"

#include <algorithm>

#include "shared/util/assert.hpp"

namespace fedcore::federation {

ScalingChoice choose_feature_scaling(const RunConfig& config,
                                     const std::vector<std::int64_t>& input_shape) {
  using protocol::ScalingMode;
  if (config.feature_scaling == ScalingMode::none) {
    return {ScalingMode::none, ""};
  }
  if (config.model.type == model::ModelType::external) {
    return {ScalingMode::none,
            "an external model: the sites' own code holds its data and scales it itself"};
  }
  if (input_shape.size() != 1) {
    return {ScalingMode::none,
            "the model's input is not tabular; image loaders scale their pixels already"};
  }
  if (config.feature_scaling == ScalingMode::site) {
    return {ScalingMode::site, ""};
  }
  if (config.privacy.secure_aggregation || config.privacy.dp.mode != protocol::DpMode::none) {
    return {ScalingMode::site,
            "the run uses secure aggregation or differential privacy, which per-site "
            "feature statistics would bypass; each site standardises with its own"};
  }
  if (input_shape.front() > static_cast<std::int64_t>(protocol::kMaxScaledFeatures)) {
    return {ScalingMode::site, "more than " + std::to_string(protocol::kMaxScaledFeatures) +
                                   " features; each site standardises with its own statistics"};
  }
  return {ScalingMode::federated, ""};
}

protocol::FeatureScaling federated_scaling(const data::FeatureScale& scale) {
  return {protocol::ScalingMode::federated, scale.mean, scale.stddev};
}

FeatureStatsCollection::FeatureStatsCollection(std::int64_t run_id, std::uint32_t features,
                                               std::map<std::string, std::string> nonces,
                                               std::size_t quorum)
    : run_id_(run_id), features_(features), nonces_(std::move(nonces)), quorum_(quorum) {
  FEDCORE_ASSERT(features >= 1 && features <= protocol::kMaxScaledFeatures,
                 "FeatureStatsCollection: feature count out of range");
  FEDCORE_ASSERT(quorum >= 1, "FeatureStatsCollection: quorum must be positive");
}

protocol::FeatureStatsRequest FeatureStatsCollection::request_for(
    const std::string& client_id) const {
  FEDCORE_ASSERT(nonces_.count(client_id) == 1, "FeatureStatsCollection: client not asked");
  return {run_id_, nonces_.at(client_id), features_};
}

bool FeatureStatsCollection::is_waiting_for(const std::string& client_id) const {
  return nonces_.count(client_id) == 1 && answered_by_.count(client_id) == 0;
}

result<void> FeatureStatsCollection::on_report(const std::string& client_id,
                                               const protocol::FeatureStatsReport& report) {
  if (!is_waiting_for(client_id)) {
    return fail(errc::failed_precondition,
                nonces_.count(client_id) == 1
                    ? "this client has answered the feature statistics request already"
                    : "this client was not asked for feature statistics");
  }
  if (report.run_id != run_id_ || report.nonce != nonces_.at(client_id)) {
    return fail(errc::invalid_argument, "the report is for another request (run " +
                                            std::to_string(report.run_id) + ", or another nonce)");
  }
  if (report.features != features_) {
    return fail(errc::invalid_argument, "the report has " + std::to_string(report.features) +
                                            " features, the run's model " +
                                            std::to_string(features_));
  }
  reports_[client_id] = data::FeatureMoments{report.count, report.sum, report.sum_squares};
  answered_by_[client_id] = true;
  ++answered_;
  return {};
}

bool FeatureStatsCollection::on_no_answer(const std::string& client_id) {
  if (!is_waiting_for(client_id)) {
    return false;
  }
  answered_by_[client_id] = false;
  ++answered_;
  return true;
}

result<FeatureStatsCollection::Combined> FeatureStatsCollection::combine() const {
  if (reports_.size() < quorum_) {
    return fail(errc::failed_precondition, std::to_string(reports_.size()) + " of " +
                                               std::to_string(nonces_.size()) +
                                               " asked sites reported feature statistics; " +
                                               std::to_string(quorum_) + " needed (min_clients)");
  }
  std::vector<data::FeatureMoments> all;
  for (const auto& [id, moments] : reports_) {
    all.push_back(moments);
  }
  auto total = data::combine_moments(all);
  if (!total) {
    return total.error();
  }
  auto scale = data::scale_from_moments(*total);
  if (!scale) {
    return scale.error();
  }
  return Combined{std::move(*scale), *std::max_element(total->count.begin(), total->count.end())};
}

}  // namespace fedcore::federation
