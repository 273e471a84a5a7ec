// Heterogeneous workers: each rank's share of the global batch in proportion to its
// measured throughput, so that a fast rank does not wait for a slow one at every step.
//
// With a uniform split every step lasts as long as the slowest rank needs for its B / N
// samples. Here rank r trains on b_r samples, sum b_r = G (the global batch stays fixed),
// with b_r proportional to the samples per second r achieved over the last `period` steps
// (its compute: forward and backward, not the time it waited for the others). Every
// `period` steps the ranks share (one allgather of two numbers) their compute seconds and
// samples, and every rank computes the same new split from the same numbers.
//
// The update stays the uniform-split one: each rank scales its loss gradient by
// b_r N / G before back-propagating, so the averaging allreduce yields
// sum_r (b_r / G) g_r = the gradient of the mean loss over all G samples, exactly as with
// b_r = G / N (for models without BatchNorm; with it, each rank normalises with the
// statistics of its own b_r samples, and a small b_r gives noisy statistics: the split keeps
// every b_r >= min_local_batch for that reason). The step size needs no rescaling since G
// does not change.
//
// Thread safety: none; one per rank.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "shared/collective/communicator.hpp"
#include "shared/util/error.hpp"

namespace fedcore::distributed {

struct AdaptiveSplitOptions {
  bool enabled = false;
  std::size_t period = 20;  // steps between re-measurements
  int min_local_batch = 2;  // no rank's share falls below this
};

// G split in proportion to `throughputs` (samples per second, one per rank, > 0), every
// share >= min_share, summing to exactly `global`: the largest-remainder method on what is
// left after the minimum shares, ties to the lower rank. REQUIRES: global >= min_share *
// ranks, min_share >= 1.
std::vector<int> proportional_split(int global, std::span<const double> throughputs, int min_share);

class AdaptiveSplit {
 public:
  // Starts from the uniform split of global = local_batch * world.
  AdaptiveSplit(int world, int local_batch, const AdaptiveSplitOptions& options);

  const std::vector<int>& split() const noexcept { return split_; }
  int share(int rank) const { return split_[static_cast<std::size_t>(rank)]; }
  // Where rank's samples start inside the global batch.
  int offset(int rank) const;
  int global_batch() const noexcept { return global_; }
  // b_r N / G: the factor on the rank's loss gradient that makes the averaged gradient the
  // global batch's.
  float gradient_scale(int rank) const;

  // This rank spent `seconds` computing `samples` samples in the step just done.
  void record(double seconds, int samples);
  // After step `done` (1-based): every `period` steps, shares the measurements and
  // re-splits. Call on every rank after every step. Returns whether the split changed.
  // Errors: the allgather's.
  result<bool> after_step(collective::Communicator& comm, std::size_t done);
  // The splits used so far, one entry per re-split: {step, split}.
  struct Change {
    std::size_t step;
    std::vector<int> split;
  };
  const std::vector<Change>& history() const noexcept { return history_; }

 private:
  int world_;
  int global_;
  AdaptiveSplitOptions options_;
  std::vector<int> split_;
  double seconds_ = 0;
  double samples_ = 0;
  std::vector<Change> history_;
};

}  // namespace fedcore::distributed
