// Data-parallel (synchronous SGD) training of one model on every rank of a group.
//
// Every rank holds the whole model, initialised from the same seed (and then broadcast
// from rank 0, so a rank that built it differently cannot diverge silently). Each epoch
// the training set is shuffled by an Rng seeded from (seed, epoch), identically on all
// ranks, and cut into global batches of batch_size × world samples; rank r trains on the
// r-th slice of batch_size samples of every global batch, so shards are disjoint and
// change every epoch. The last incomplete global batch of an epoch is dropped, so every
// rank takes the same number of steps. **Global batch = local batch × world**: to train
// like a single worker with batch B, give each of N workers B / N.
//
// A step: forward, loss, backward with gradients averaged over all ranks in buckets
// (GradientReducer, overlapped with backward), optimizer step. Every rank applies the
// same averaged gradients to the same parameters, so parameters stay bit-identical; the
// result carries each rank's parameter CRC-32 to prove it.
//
// Checkpoints: with checkpoint_dir and checkpoint_every = K, rank 0 writes the parameters
// and the optimizer state (momentum, Adam moments and step count) every K steps, in one
// file, atomically (distributed/checkpoint.hpp); at start, if the checkpoint exists, rank 0
// loads it and every rank resumes from it. Resuming is exact: K steps, a checkpoint, a
// new group resumed to N steps gives bit-identical parameters to N steps in one go (for
// SGD with momentum and for Adam; tested). A checkpoint for another model, or whose
// optimizer state does not fit the configured optimizer, is refused with an error.
//
// BatchNorm (models with state, e.g. MobileNetV2): each rank normalises with the
// statistics of its own local batch, as PyTorch's DDP does without SyncBatchNorm, so the
// local batch, not the global one, is what BatchNorm sees. The running statistics each rank
// accumulates are averaged over the ranks (one allreduce of the small state buffer) before
// every evaluation and at the end, so every rank ends with the same state and the
// evaluated model has statistics from all shards (PyTorch's DDP instead copies rank 0's
// buffers to the others at every forward).
//
// Asynchronous modes: EASGD (easgd_alpha > 0, below) and parameter-server ASGD
// (async = parameter_server, distributed/param_server.hpp; train_data_parallel runs it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distributed/adaptive_split.hpp"
#include "distributed/grad_reducer.hpp"
#include "shared/collective/communicator.hpp"
#include "shared/data/dataset.hpp"
#include "shared/data/image_transforms.hpp"
#include "shared/model/optimizer.hpp"
#include "shared/model/spec.hpp"

namespace fedcore::distributed {

enum class AsyncMode { none, parameter_server };
// Parameter server: the learning rate of an update with staleness s.
enum class StalenessLr {
  constant,  // lr
  inverse,   // lr / (s + 1) (Zhang et al. 2016, "staleness-aware" ASGD)
};
inline constexpr std::size_t kUnboundedStaleness = static_cast<std::size_t>(-1);

struct TrainOptions {
  model::ModelSpec spec;  // complete (input shape and classes filled)
  model::OptimizerConfig optimizer;
  int epochs = 1;
  int batch_size = 32;  // per rank
  std::uint64_t seed = 1;
  std::size_t max_steps = 0;  // 0: whole epochs
  ReducerOptions reducer;
  std::string checkpoint_dir;  // empty: no checkpoints
  std::size_t checkpoint_every = 0;
  bool evaluate = true;  // rank 0 evaluates on the test set at the end
  // Also at the end of every epoch, for the accuracy-per-epoch curve (TrainResult::curve).
  // The time spent evaluating is left out of the training times.
  bool evaluate_every_epoch = false;
  // Random crop and flip of each rank's local batch (images only), seeded by (seed, step,
  // rank).
  data::Augmentation augmentation{};
  // Heterogeneous workers (distributed/adaptive_split.hpp): local batches in proportion to
  // each rank's measured throughput, the global batch (batch_size x world) fixed.
  // Synchronous SGD only.
  AdaptiveSplitOptions adaptive{};
  // Test and benchmark hook: this rank computes `test_slowdown` times slower (it sleeps
  // (factor - 1) x its previous step's own compute time between forward and backward),
  // standing in for a slower machine. -1: none.
  int test_slow_rank = -1;
  double test_slowdown = 1.0;
  // Elastic averaging SGD (EASGD, synchronous form) instead of synchronous SGD when
  // alpha > 0: every rank takes local SGD steps on its own shard, and every `period`
  // steps all ranks and a center variable c are pulled together by one allreduce:
  // x_i -= alpha (x_i - c), c += alpha sum_i (x_i - c). Communication drops by `period`x;
  // the price is staleness: between averagings the replicas drift apart (more with a
  // larger period or learning rate, less with a larger alpha; Zhang et al. recommend
  // alpha = 0.9 / world for stability). The trained model is c, identical on all ranks;
  // checkpoints hold c. Local parameters are not bit-identical between averagings.
  float easgd_alpha = 0.0f;
  std::size_t easgd_period = 4;
  // Parameter-server asynchronous SGD (distributed/param_server.hpp) instead of synchronous
  // SGD: rank 0 holds the parameters and the optimizer, ranks 1.. push gradients.
  // Gradients staler than max_staleness updates are discarded. Needs world >= 2.
  AsyncMode async = AsyncMode::none;
  std::size_t max_staleness = kUnboundedStaleness;
  StalenessLr staleness_lr = StalenessLr::constant;
  // Test hook: this rank exits the process with status 17 after this step, unless the
  // run resumed from a checkpoint (0 = never).
  std::size_t test_crash_after_step = 0;
};

struct RankStats {
  int rank = 0;
  double wall_seconds = 0;         // training loop only
  double cpu_seconds = 0;          // this process's user + system time during the loop
  double comm_seconds = 0;         // time inside collectives (overlapped time included)
  double peak_rss_mb = 0;          // this process's peak resident set
  double samples = 0;              // samples this rank trained on
  std::uint32_t param_crc32 = 0;   // of the final parameters
  std::uint64_t cpu_mask = 0;      // CPUs 0..51 this process may run on (bit i = CPU i)
  double shared_memory_bytes = 0;  // payload bytes sent through shared-memory rings
};

// Parameter-server statistics, kept by the server (rank 0).
struct PsStats {
  int workers = 0;
  std::size_t updates = 0;         // gradients applied: steps - start_step
  std::size_t received = 0;        // gradients received: updates + discarded + unused_at_stop
  std::size_t discarded = 0;       // staler than max_staleness, dropped
  std::size_t unused_at_stop = 0;  // arrived after the update budget was spent
  double mean_staleness = 0;       // over the applied updates
  std::size_t max_staleness = 0;   // of an applied update
  // staleness_histogram[s]: applied updates of staleness s (sums to `updates`).
  std::vector<std::size_t> staleness_histogram;
};

// One point of the accuracy-per-epoch curve.
struct EpochPoint {
  int epoch = 0;             // 1-based: after this many epochs
  double train_seconds = 0;  // training time so far, evaluations left out (rank 0's clock)
  double train_loss = 0;     // mean over the epoch's steps on rank 0
  double test_accuracy = 0;
  double test_loss = 0;
};

struct TrainResult {
  int world = 1;
  std::size_t start_step = 0;  // > 0 when resumed from a checkpoint
  std::size_t steps = 0;       // the final global step
  double samples = 0;          // over all ranks, this run
  double wall_seconds = 0;     // slowest rank
  double samples_per_second = 0;
  double final_train_loss = 0;  // mean over the last epoch's steps on this rank
  double test_accuracy = -1;    // rank 0 only when evaluate (else -1)
  double test_loss = -1;
  std::vector<EpochPoint> curve;              // evaluate_every_epoch: every rank's copy of rank 0's
  std::vector<AdaptiveSplit::Change> splits;  // adaptive: every re-split, on every rank
  std::vector<RankStats> ranks;               // every rank's, on every rank
  std::vector<float> params;                  // this rank's final parameters
  std::vector<float> state;  // and state (running statistics, averaged over the ranks)
  AsyncMode async = AsyncMode::none;
  PsStats ps;  // parameter server: filled on rank 0 (workers only `workers`)
};

// Runs synchronous SGD, EASGD or (async = parameter_server) PS-ASGD.
// Errors: invalid_argument (fewer training samples than one global batch, bad options,
// the parameter server with one rank, EASGD together with the parameter server), the
// collectives' errors (a peer died, timed out or is out of step), checkpoint I/O and
// restore_checkpoint's (distributed/checkpoint.hpp).
result<TrainResult> train_data_parallel(collective::Communicator& comm, const data::TrainTest& data,
                                        const TrainOptions& options);

}  // namespace fedcore::distributed
