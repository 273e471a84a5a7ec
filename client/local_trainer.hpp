// Local training: what a site does with one TRAIN request, without any I/O.
//
// Builds the announced model (completing the spec from the local data's schema), checks
// that its layout is the one the server announced, loads the received global parameters,
// optionally evaluates them on the local test split, trains for the requested epochs and
// returns the new parameters with the report the UPDATE carries (echoing run, round and
// nonce). A request the site cannot honour comes back as `failure`; the session then
// tells the server with an ERROR frame, and the server records the client as dropped.
//
// Thread safety: a pure function of its arguments; runs on the daemon's worker thread.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "shared/data/dataset.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

struct LocalResult {
  std::optional<error> failure;  // set when the request could not be honoured
  std::vector<float> params;
  protocol::UpdateReport report;
};

// `threads`: compute threads for this training (set_compute_threads).
LocalResult train_locally(const protocol::TrainRequest& request, std::span<const float> global,
                          const data::TrainTest& data, int threads);

}  // namespace fedcore::client
