// Feature scaling at the site: what a TRAIN's "scaling" does to the site's data, and the
// site's answer when the server asks for its feature statistics (docs/protocol.md,
// "Feature scaling").
//
//   none       the data as loaded (image loaders already scale their pixels);
//   site       both splits standardised with the training split's own mean and standard
//              deviation (the test split never contributes statistics);
//   federated  both splits standardised with the run's one scale, which the server
//              estimated from every selected site's training-split moments.
//
// What a site reports (feature_stats_report) is, per feature, the number of values of its
// training split, their sum and their sum of squares: aggregates, never a record, but for
// a small site they describe its population closely. docs/privacy.md says who sees them.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include "client/site_policy.hpp"
#include "shared/data/dataset.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

// A copy of `data` scaled as `scaling` says (mode none: an unchanged copy; callers that
// train unscaled need not call this). Errors: failed_precondition when the data are not
// tabular (sample_shape of one dimension) or, for a federated scale, when its feature
// count differs from the data's (both counts named).
result<data::TrainTest> scaled_copy(const protocol::FeatureScaling& scaling,
                                    const data::TrainTest& data);

// The answer to `request`: the moments of `train`, echoing run and nonce. Errors:
// failed_precondition when the data are not tabular or hold a different number of
// features than the request names (both counts named), or the split has more samples than
// a report may carry.
result<protocol::FeatureStatsReport> feature_stats_report(
    const protocol::FeatureStatsRequest& request, const data::Dataset& train);

// Whether a site with this policy reports its feature statistics when asked. Not when the
// policy requires secure aggregation or differential privacy: the statistics would leave
// the site in the clear, outside the protection the site asks every run for.
bool shares_feature_statistics(const SitePolicy& policy) noexcept;

}  // namespace fedcore::client
