// Pieces shared by the two data-parallel trainers: synchronous SGD and EASGD
// (data_parallel.cpp) and parameter-server asynchronous SGD (param_server.cpp).
//
// Thread safety: none; each object belongs to one rank's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "distributed/data_parallel.hpp"
#include "distributed/layer_stack.hpp"
#include "shared/collective/communicator.hpp"
#include "shared/data/dataset.hpp"
#include "shared/model/eval_report.hpp"
#include "shared/model/loss.hpp"
#include "shared/model/model.hpp"

namespace fedcore::distributed {

// This process's user + system CPU seconds so far, and its peak resident set in MB.
double cpu_seconds_now();
double peak_rss_mb();
// The CPUs among 0..kMaskedCpus-1 this process may run on, bit i for CPU i (a double
// holds the mask exactly, so it travels with the other statistics).
inline constexpr int kMaskedCpus = 52;
std::uint64_t cpu_mask();

// Disjoint shards that change every epoch. Each epoch the training set is shuffled by an
// Rng seeded from (seed, epoch) — the same order on every rank — and cut into global
// batches of batch × slots samples; slot s takes the s-th run of `batch` samples of
// every global batch. The last incomplete global batch of an epoch is dropped.
class ShardedBatches {
 public:
  // REQUIRES: batch > 0, slots > 0, train.size() >= batch * slots.
  ShardedBatches(const data::Dataset& train, int batch, int slots, std::uint64_t seed);

  std::size_t steps_per_epoch() const noexcept { return steps_per_epoch_; }
  std::size_t epoch_of(std::size_t step) const noexcept { return step / steps_per_epoch_; }

  // Copies slot `slot`'s samples of global batch `step` (counted over all epochs) into
  // the batch matrix and labels, which must have `batch` columns / entries.
  void fill(std::size_t step, int slot, Matrix& batch, std::vector<std::int32_t>& labels);
  // Copies samples [first, first + batch.cols()) of global batch `step` (an uneven split of
  // it, distributed/adaptive_split.hpp). REQUIRES: they lie inside the global batch;
  // labels.size() == batch.cols().
  void fill_range(std::size_t step, std::size_t first, Matrix& batch,
                  std::vector<std::int32_t>& labels);

 private:
  const data::Dataset& train_;
  int batch_;
  int slots_;
  std::uint64_t seed_;
  std::size_t steps_per_epoch_;
  std::vector<std::size_t> order_;
  std::size_t order_epoch_ = static_cast<std::size_t>(-1);
};

// Averages the ranks' non-trainable state (BatchNorm running statistics) in place: each
// rank's statistics saw only its own shard's batches. No-op (no message) for a model
// without state. Errors: the allreduce's.
result<void> average_state(collective::Communicator& comm, std::span<float> state);

// Rank 0 tests `model` as it stands on `test`; the loss and accuracy are broadcast, so
// every rank returns them (the other ranks' `model` is not read). Errors: the broadcast's.
result<model::EvalReport> evaluate_on_rank0(collective::Communicator& comm, model::Model& model,
                                            model::LossKind loss, const data::Dataset& test);
// The same after rank 0 copied `params` and `state` (the whole model's) into `reference`.
result<model::EvalReport> evaluate_everywhere(collective::Communicator& comm,
                                              std::span<const float> params,
                                              std::span<const float> state, model::Model& reference,
                                              model::LossKind loss, const data::Dataset& test);

// Shares every rank's statistics (one allgather) and fills out.ranks, out.samples (sum),
// out.wall_seconds (slowest rank) and out.samples_per_second. Errors: the allgather's.
result<void> gather_rank_stats(collective::Communicator& comm, const RankStats& mine,
                               TrainResult& out);

// This rank's CPU and communication meters at the start of the training loop.
struct RunMeters {
  double cpu_seconds = 0;
  double comm_seconds = 0;
  static RunMeters now(const collective::Communicator& comm);
};

// The end of every data-parallel trainer: completes `mine` (CPU and communication time
// since `started`, peak RSS, CRC-32 of the final parameters), gathers every rank's
// statistics into `out` (gather_rank_stats), copies this rank's parameters into
// out.params and, on rank 0 when `evaluate`, tests them (with the stack's state, which the
// caller has averaged) through `reference` on `test`.
// The caller has set mine.rank, mine.wall_seconds and mine.samples. Errors: the gather's.
result<void> finish_run(collective::Communicator& comm, const RunMeters& started,
                        const LayerStack& stack, model::Model& reference, model::LossKind loss,
                        const data::Dataset& test, bool evaluate, RankStats& mine,
                        TrainResult& out);

}  // namespace fedcore::distributed
