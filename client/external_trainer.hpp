// ExternalTrainer: a site whose model is trained by its own code (the Python SDK, python/),
// while the daemon keeps doing everything else — TLS and identity, reconnects, heartbeats,
// the site policy, the audit log, secure-aggregation masking.
//
// The run's model spec is then of type "external" (shared/model/spec.hpp): a layout of
// named tensors that Fedcore aggregates and never builds. For each TRAIN the daemon checks
// the request (spec type, the server's layout fingerprint against the spec's layout, the
// site's own declared layout if it gave one, no record-level DP: that needs Fedcore's
// DP-SGD), hands the global parameters to `fit` on its worker thread, and checks what comes
// back (the layout's size, every value finite) before the update may leave. A failure of
// `fit` (a Python exception) is answered with an ERROR carrying its message: the server
// records the site as dropped for the round, and the daemon carries on.
//
// Thread safety: the daemon calls fit and evaluate on its worker thread, one at a time,
// and shape/layout from any thread; an implementation needs no locking of its own.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "client/local_trainer.hpp"
#include "client/site_data.hpp"
#include "shared/model/layout.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

// What the site's code returns for one TRAIN.
struct ExternalFit {
  std::vector<float> params;  // the trained parameters, in the layout's flat order
  std::uint64_t samples = 0;  // examples trained on: the update's FedAvg weight
  double loss = 0;            // optional training metrics, shown in the history
  double accuracy = 0;
};

class ExternalTrainer {
 public:
  virtual ~ExternalTrainer() = default;
  // What HELLO announces: sample counts and the data's schema.
  virtual SiteDataShape shape() const = 0;
  // The layout of the site's model, checked against every request's; nullopt when the site
  // does not declare one (then only the parameter count is checked).
  virtual std::optional<model::ParamLayout> layout() const = 0;
  // Trains on the global parameters (valid during the call only), whose tensors `layout`
  // (the run's, checked) describes. Errors are reported to the server as this round's
  // failure, with their message.
  virtual result<ExternalFit> fit(const protocol::TrainRequest& request,
                                  const model::ParamLayout& layout,
                                  std::span<const float> global) = 0;
  // Evaluates parameters of `layout` on the site's test data.
  virtual result<protocol::LocalEvaluation> evaluate(std::int64_t run_id, std::int64_t round,
                                                     const model::ParamLayout& layout,
                                                     std::span<const float> params) = 0;
};

// One TRAIN served by `site`, with the checks above; a refused request or a failed fit
// comes back as LocalResult::failure. request.evaluate also evaluates the received model
// first (a failed evaluation is logged and left out of the report, as training goes on).
LocalResult train_externally(ExternalTrainer& site, const protocol::TrainRequest& request,
                             std::span<const float> global);

// One EVALUATE served by `site`. Errors: failed_precondition (not an external model, a
// layout other than the announced one, a payload of another size), those of `evaluate`.
result<protocol::LocalEvaluation> evaluate_externally(ExternalTrainer& site,
                                                      const protocol::EvaluateRequest& request,
                                                      std::span<const float> params);

}  // namespace fedcore::client
