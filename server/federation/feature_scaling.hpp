// The run's feature scale on the server (docs/protocol.md, "Feature scaling").
//
// choose_feature_scaling says what a run's "feature_scaling" comes to for its model:
//   - an external model (trained by the sites' own code): none; Fedcore never sees its data;
//   - a model whose input is not tabular (images): none; their loaders scale pixels;
//   - "none" and "site": as configured;
//   - "federated" in a run with secure aggregation or any DP: site. A site's statistics
//     would reach the server in the clear, outside the protection the run promises; each
//     site standardises with its own instead (docs/privacy.md, "Feature scaling");
//   - "federated" with more than protocol::kMaxScaledFeatures features: site;
//   - otherwise federated.
//
// FeatureStatsCollection is one request for the sites' statistics, from the requests to
// the combined scale: a nonce per asked client binds its report to the request, a report
// is checked (run, nonce, feature count) before it is kept, and the scale is combined only
// from at least `quorum` reports. It keeps every report in memory until then; the server
// stores only the combined scale. The controller owns its deadline.
//
// Thread safety: none; the run controller's thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "server/federation/run_config.hpp"
#include "shared/data/feature_stats.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/util/error.hpp"

namespace fedcore::federation {

struct ScalingChoice {
  protocol::ScalingMode mode = protocol::ScalingMode::none;
  std::string reason;  // why the mode differs from the configured one; empty if it does not
};

ScalingChoice choose_feature_scaling(const RunConfig& config,
                                     const std::vector<std::int64_t>& input_shape);

// What TRAIN carries for a combined scale.
protocol::FeatureScaling federated_scaling(const data::FeatureScale& scale);

class FeatureStatsCollection {
 public:
  // Asks every client of `nonces` (client id -> its nonce) for `features` features.
  // REQUIRES: 1 <= features <= protocol::kMaxScaledFeatures; quorum >= 1.
  FeatureStatsCollection(std::int64_t run_id, std::uint32_t features,
                         std::map<std::string, std::string> nonces, std::size_t quorum);

  // The request to send to `client_id`. REQUIRES: the client is asked.
  protocol::FeatureStatsRequest request_for(const std::string& client_id) const;

  // Keeps a client's report. Errors: failed_precondition (the client was not asked or has
  // answered already); invalid_argument (another run, another nonce, another feature count).
  [[nodiscard]] result<void> on_report(const std::string& client_id,
                                       const protocol::FeatureStatsReport& report);
  // The client refused or left without a report. False if it was not waited for.
  bool on_no_answer(const std::string& client_id);

  bool is_waiting_for(const std::string& client_id) const;
  bool all_answered() const noexcept { return answered_ == nonces_.size(); }
  std::size_t asked() const noexcept { return nonces_.size(); }
  std::size_t reports() const noexcept { return reports_.size(); }

  // The combined scale and the samples behind it (the largest per-feature count). Errors:
  // failed_precondition when fewer than `quorum` clients reported ("2 of 3 asked sites
  // reported feature statistics; 3 needed"), or when a feature has no value at all.
  struct Combined {
    data::FeatureScale scale;
    std::uint64_t samples = 0;
  };
  [[nodiscard]] result<Combined> combine() const;

 private:
  std::int64_t run_id_;
  std::uint32_t features_;
  std::map<std::string, std::string> nonces_;
  std::size_t quorum_;
  std::map<std::string, data::FeatureMoments> reports_;
  std::map<std::string, bool> answered_by_;
  std::size_t answered_ = 0;
};

}  // namespace fedcore::federation
