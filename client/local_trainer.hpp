// Local training: what a site does with one TRAIN request, without any I/O.
//
// Scales a copy of the data as the request's "scaling" says (client/feature_scaling.hpp;
// a scale that does not fit the data is a failure), builds the announced model
// (completing the spec from the local data's schema), checks that its layout is the one
// the server announced, loads the received global parameters, optionally evaluates them
// on the local test split, trains for the requested epochs and returns the new parameters
// with the report the UPDATE carries (echoing run, round and nonce). A request the site cannot
// honour comes back as `failure`; the session then tells the server with an ERROR frame, and the
// server records the client as dropped.
//
// Record-level DP (request.privacy.dp == DpMode::record): training is DP-SGD
// (shared/model/dp_sgd.hpp) with the request's epochs, its batch size as the expected
// batch, and its clip norm and noise multiplier, which must both be positive and finite
// (else failure invalid_argument). The randomness comes from OpenSSL's private CSPRNG
// (client/dp_noise.hpp) unless the caller injects it; the request's seed is not used.
// `record_dp` then says what the site's own accountant needs. Under record-level DP the
// report carries no training loss or accuracy (both 0) and no evaluation of the received
// model: those are computed from private records without noise and are outside the
// guarantee.
//
// Thread safety: a pure function of its arguments; runs on the daemon's worker thread.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "shared/data/dataset.hpp"
#include "shared/model/dp_sgd.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

// What one DP-SGD training spent, for the site's accountant (Poisson-sampled Gaussian).
struct RecordDpSteps {
  double sampling_rate = 0;     // q = expected batch / local records
  double noise_multiplier = 0;  // z
  std::uint64_t steps = 0;      // steps taken
};

struct LocalResult {
  std::optional<error> failure;  // set when the request could not be honoured
  std::vector<float> params;
  std::uint64_t steps = 0;  // optimizer steps taken (SCAFFOLD's K)
  protocol::UpdateReport report;
  std::optional<RecordDpSteps> record_dp;  // set when trained with record-level DP
  // FedBN (request.site_batch_norm): the site's BatchNorm values after training, packed in
  // site_ranges order (client/site_batch_norm.hpp); `params` holds the global model's there.
  std::vector<float> site_values;
};

// `threads`: compute threads for this training (set_compute_threads).
// `dp_random`: DP-SGD's randomness; nullopt means a CSPRNG (tests pass seeded sources).
// `correction`: SCAFFOLD's c - c_i, added to every gradient (empty: none); a correction of
// the wrong size, or one with record-level DP, is a failure invalid_argument.
// `site_values`: with request.site_batch_norm, the site's BatchNorm values from an earlier
// round (LocalResult::site_values; empty or of another size: the global model's are used).
// `global` is the model's parameters then its BatchNorm state (model/federated_vector.hpp);
// a model with BatchNorm under record-level DP, or site_batch_norm for a model without
// BatchNorm, is a failure invalid_argument.
LocalResult train_locally(const protocol::TrainRequest& request, std::span<const float> global,
                          const data::TrainTest& data, int threads,
                          const std::optional<model::DpRandom>& dp_random = std::nullopt,
                          std::span<const float> correction = {},
                          std::span<const float> site_values = {});

}  // namespace fedcore::client
