// Local evaluation: what a site does with one EVALUATE request, without any I/O.
//
// Builds the announced model exactly as local training does (the request's scaling applied
// to a copy of the data, the spec completed from the local schema, the layout checked
// against the server's fingerprint), loads the parameters of the payload and evaluates them
// on the local test split. Nothing is trained; nothing but the three numbers leaves.
//
// Errors: failed_precondition (no test split, a layout other than the announced one, a
// payload of another size, a scale that does not fit the data), and those of the model
// spec and scaling (invalid_argument).
//
// Thread safety: a pure function of its arguments; runs on the daemon's worker thread.
#pragma once

#include <span>

#include "shared/data/dataset.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

// `threads`: compute threads for this evaluation (set_compute_threads).
// `site_values`: with request.site_batch_norm (FedBN), the site's own BatchNorm values
// (client/site_batch_norm.hpp), evaluated in place of the payload's; empty or of another
// size: the payload's. site_batch_norm for a model without BatchNorm is invalid_argument.
result<protocol::LocalEvaluation> evaluate_locally(const protocol::EvaluateRequest& request,
                                                   std::span<const float> params,
                                                   const data::TrainTest& data, int threads,
                                                   std::span<const float> site_values = {});

}  // namespace fedcore::client
