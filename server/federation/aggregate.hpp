// Aggregation: validating client updates and folding them into the next global model.
//
// Updates are full parameter vectors (a client's locally trained model), weighted by the
// client's sample count, as in FedAvg (McMahan et al. 2017). `validate_update` checks an
// update before it may touch the aggregate (docs/engineering.md S2); a Strategy folds valid
// updates one at a time into a running sum, so the server's memory is O(model) whatever
// the number of clients, and produces the next global model when the round closes. FedAvg's
// sum is exact fixed point (fixed_point_mean.hpp): the next model is the same bits whatever
// order the updates arrive in.
//
// Thread safety: none; a round's strategy belongs to the round's coroutine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/federation/strategy_config.hpp"
#include "shared/model/layout.hpp"
#include "shared/util/error.hpp"
#include "shared/util/worker_pool.hpp"

namespace fedcore::federation {

struct UpdateChecks {
  // Reject updates whose L2 distance from the round's global model exceeds this (0 = no
  // bound of the run's own). FixedPointMean::kMaxDistance (65,536) always applies: the
  // exact sum's range is planned for it.
  double max_update_norm = 0;
  // Reject sample counts above this: a client cannot buy a larger say in the average.
  std::uint64_t max_samples = std::uint64_t{1} << 32;
};

// Why an update was refused. The names (rejection_name) are stable: they are the metrics
// label and the reason_code of update_rejected events.
enum class Rejection {
  layout,      // the layout fingerprint the client claims is not the global model's
  shape,       // the value count differs from the layout's total
  non_finite,  // a NaN or an infinity
  samples,     // the sample count is 0 or above UpdateChecks::max_samples
  norm,        // the update moves the model further than UpdateChecks::max_update_norm
  // Checked by Round (round.hpp), which knows the client: more samples than the client
  // declared in its HELLO.
  samples_above_declared,
  // Checked by Round for a strategy that wants a control variate with each update
  // (SCAFFOLD, scaffold.hpp): it is missing, of the wrong size or not finite, or one came
  // that the strategy does not use.
  control,
};
std::string_view rejection_name(Rejection reason) noexcept;

struct RejectedUpdate {
  Rejection reason;
  std::string message;  // for people: which tensor and index, the measured norm, ...
};

// The L2 distance between an update and the global model, computed in double.
// REQUIRES: equal sizes.
double update_distance(std::span<const float> update, std::span<const float> global);

// Whether an update at squared L2 distance `squared` from the global model may be folded:
// finite, within the run's bound and within FixedPointMean::kMaxDistance. The one rule
// validate_update and the fused fold (Strategy::add_update_measured) both apply.
bool distance_allowed(double squared, const UpdateChecks& checks) noexcept;

// Checks, in the order of the Rejection enum (the first failing check is reported).
// Returns nothing for an update that may be aggregated.
[[nodiscard]] std::optional<RejectedUpdate> validate_update(
    std::span<const float> update, std::string_view claimed_fingerprint, std::uint64_t samples,
    std::span<const float> global, const model::ParamLayout& layout, const UpdateChecks& checks);

// An update's values made a chunk at a time: writes values [begin, begin + out.size()) into
// `out` (the same type as FixedPointMean::ChunkSource).
using UpdateChunks = std::function<void(std::size_t begin, std::span<float> out)>;

// What a strategy carries from one round to the next (a server optimizer's moments), saved
// beside each round's checkpoint and restored when a run resumes (run_model.hpp).
struct ServerState {
  std::string strategy;            // the name of the strategy that made it
  std::int64_t steps = 0;          // rounds folded into it
  std::vector<std::string> names;  // its vectors, e.g. {"m", "v"}
  std::vector<float> values;       // names.size() vectors of one value per parameter, in order
};

// The seam for aggregation strategies. One object lives for a whole run (so strategies
// with server state, e.g. server momentum, can keep it between rounds).
class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string_view name() const noexcept = 0;
  // Starts a round from the current global model. `max_total_weight` (>= 1) bounds the sum
  // of the weights add_update will be given this round: the selected clients' declared
  // sample counts, each capped as the round caps it. REQUIRES: `global` stays alive and
  // unchanged until finish_round.
  virtual void begin_round(std::span<const float> global, std::uint64_t max_total_weight) = 0;
  // How many clients the round selected (DP-FedAvg divides by it); most ignore it.
  virtual void expect_clients(std::size_t /*selected*/) {}
  // How many clients were eligible when the round selected (SCAFFOLD divides the change
  // of its control variate by it); most ignore it.
  virtual void expect_population(std::size_t /*eligible*/) {}
  // SCAFFOLD (scaffold.hpp): whether every update must come with the change of its site's
  // control variate, one value per parameter; the control variate the sites are sent with
  // each TRAIN (empty for strategies without one); and the change of one accepted update.
  virtual bool wants_control() const noexcept { return false; }
  virtual std::span<const float> control() const noexcept { return {}; }
  virtual void add_control(std::span<const float> /*delta*/) {}
  // Folds in one validated update; the weights of a round stay within begin_round's bound.
  virtual void add_update(std::span<const float> update, std::uint64_t samples) = 0;
  // The fused path (Round, round.cpp): a strategy that can measure an update's squared
  // distance from the global model while it folds it in (FedAvg) returns that distance
  // (FixedPointMean::add_measured's contract) and takes the update back with remove_update
  // when the distance is not allowed; the others return nothing and fold nothing, and the
  // update is validated first and folded with add_update.
  virtual std::optional<double> add_update_measured(std::span<const float> /*update*/,
                                                    std::uint64_t /*samples*/) {
    return std::nullopt;
  }
  virtual void remove_update(std::span<const float> /*update*/, std::uint64_t /*samples*/) {}
  // The fused path for an update that is never held whole (a compressed step decoded as it
  // is folded, protocol::StepDecoder): `update(begin, out)` writes its values [begin,
  // begin + out.size()) into `out`, a chunk at a time (FixedPointMean::ChunkSource). Same
  // contract as the span versions; the strategies that need the whole update return
  // nothing, and the Round decodes it whole for them.
  virtual std::optional<double> add_update_measured(const UpdateChunks& /*update*/,
                                                    std::uint64_t /*samples*/) {
    return std::nullopt;
  }
  virtual void remove_update(const UpdateChunks& /*update*/, std::uint64_t /*samples*/) {}
  // Threads the strategy may fold on besides the caller's (WorkerPool::parallel_for), with
  // results that do not depend on them; null: none. Most ignore it.
  virtual void use_workers(WorkerPool* /*workers*/) noexcept {}
  virtual std::size_t updates() const noexcept = 0;
  // Why the round's updates cannot make a model under this strategy (e.g. Krum with
  // n <= 2f + 2 updates), in words for the round's failure; nothing when finish_round may
  // run. The round fails visibly instead of finishing (its quorum policy follows).
  virtual std::optional<std::string> refuse_finish() const { return std::nullopt; }
  // Returns the next global model, moved out of the strategy's state where possible.
  // REQUIRES: updates() > 0.
  virtual std::vector<float> finish_round() = 0;
  // The state after the last finish_round, as an immutable snapshot another thread may read
  // while the next round runs (the checkpoint writer); null for strategies without state.
  virtual std::shared_ptr<const ServerState> state() const { return nullptr; }
  // Continues from a state saved after a committed round. Errors: invalid_argument when it
  // is not this strategy's (another name, other sizes) or this strategy keeps none.
  virtual result<void> restore(const ServerState& saved);
};

// The strategy `config` names (strategy_config.hpp): "fedavg" (also what FedProx uses
// server-side), the server optimizers (server_optimizer.hpp), the robust aggregators
// (robust_strategy.hpp). Errors: invalid_argument for unknown names and impossible options.
result<std::unique_ptr<Strategy>> make_strategy(const StrategyConfig& config,
                                                std::size_t param_count);
// The sample-weighted mean by name only ("fedavg", "fedprox").
result<std::unique_ptr<Strategy>> make_strategy(std::string_view name, std::size_t param_count);

}  // namespace fedcore::federation
