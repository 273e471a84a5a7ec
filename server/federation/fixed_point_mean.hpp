// FixedPointMean: a sample-weighted mean of model updates that does not depend on the order
// the updates arrive in.
//
// A float running mean (or a float or double sum) rounds after every addition, so a-then-b
// and b-then-a differ in the last bits, and with updates arriving in network order two runs
// of the same federation end with different models. Here every update's weighted distance
// from the round's reference model, w * (x - g), is rounded once, on its own, to a fixed grid
// of 2^-F and added as an integer: integer addition is associative, so the sum, and the mean
// g + sum / W, are the same bits whatever the order (Σ in any order, same result).
//
// The range is made safe before the first add, not checked after: begin() is told the most
// weight the round can bring (the selected clients' declared sample counts, capped), every
// update's L2 distance from the reference is at most kMaxDistance (validate_update enforces
// it), and F = min(40, 46 - ceil(log2 W_max)) keeps W_max * kMaxDistance * 2^F within 2^62.
// So no order of any valid updates can overflow, and nothing is rejected for where it came
// in the order. Each term is truncated, so the mean's absolute error is below n * 2^-F / W
// for n updates of total weight W: 2^-40 for a few samples, 1.5e-8 for 2^20 one-sample
// clients (F = 26), below the float spacing of values near 1 (6e-8) in any real round.
//
// Memory: one int64 per parameter (twice a float mean), kept from round to round; the
// reference is read, not copied.
//
// Parallel chunks (use_workers): the parameters fall into fixed chunks of kChunkValues; with a
// worker pool, add_measured, remove and mean work on several chunks at once. Integer sums
// do not care which thread adds which chunk, and the squared distance is summed per chunk
// and then over chunks in chunk order (squared_distance below), so the results are the same
// bits with any number of threads, or none.
//
// Thread safety: none (one caller at a time; the pool only ever runs its chunks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "shared/util/worker_pool.hpp"

namespace fedcore::federation {

class FixedPointMean {
 public:
  // The largest L2 distance from the reference an update may have (validate_update rejects
  // larger ones as Rejection::norm): no real round moves a model that far.
  static constexpr double kMaxDistance = 1 << 16;
  // The most weight one round may promise in all (begin()'s max_total_weight): with
  // kMaxDistance, 2^46 * 2^16 = 2^62 keeps the int64 sum clear of overflow at F = 0.
  static constexpr std::uint64_t kMaxTotalWeight = std::uint64_t{1} << 46;

  // The fixed chunks of the parallel fold: 1 MiB of floats.
  static constexpr std::size_t kChunkValues = std::size_t{1} << 18;

  explicit FixedPointMean(std::size_t size) : size_(size) {}

  // Where chunks run from now on besides the calling thread; null: only there. The pool
  // must outlive this object's calls. REQUIRES: not called from one of the pool's threads.
  void use_workers(WorkerPool* workers) noexcept { workers_ = workers; }

  // Σ (x - g)^2 in double, exactly as add_measured measures it: per chunk of kChunkValues in
  // 8 lane sums (added in lane order), then the chunks' sums in chunk order. A fixed order,
  // so the result is the same on every run. REQUIRES: equal sizes.
  static double squared_distance(std::span<const float> x, std::span<const float> g) noexcept;

  // Starts a round around `reference` (the round's global model), for at most
  // `max_total_weight` weight in all (1 to kMaxTotalWeight). REQUIRES: reference.size() == size();
  // `reference` stays alive and unchanged until mean() or clear().
  void begin(std::span<const float> reference, std::uint64_t max_total_weight);

  // Folds in one update. REQUIRES: begin() was called; values.size() == size(); finite values
  // whose L2 distance from the reference is at most kMaxDistance; weight >= 1 and the total
  // weight stays within begin()'s max_total_weight (violations are FEDCORE_ASSERT failures).
  void add(std::span<const float> values, std::uint64_t weight);

  // add() fused with the validation's measure, for a server that would otherwise read every
  // update twice (validate_update, then add): folds in `values` unchecked and returns
  // Σ (x - g)^2 over them, computed exactly as squared_distance() computes it (the same
  // chunks and lanes, the same order), so the caller can decide with distance_allowed()
  // (aggregate.hpp). A term the sum was not planned for (a non-finite value, or one further than
  // kMaxDistance from the reference) adds 0; such an update's result is non-finite or above
  // kMaxDistance^2, and the caller must then take it back with remove(). The sum wraps modulo 2^64
  // while a bad update is in it, and remove() restores its exact bits. REQUIRES: as add(), without
  // the finiteness and distance conditions.
  double add_measured(std::span<const float> values, std::uint64_t weight);
  // Takes back exactly what add_measured(values, weight) added (same values and weight).
  void remove(std::span<const float> values, std::uint64_t weight);

  // The same two for an update that is never held whole (a compressed step decoded as it
  // is folded, protocol::StepDecoder): `values_of(begin, out)` writes the update's values
  // [begin, begin + out.size()) into `out`, one chunk of at most kChunkValues at a time, in
  // any order and from any of the fold's threads, the same values each time it is asked.
  // Bit for bit the result of the span versions on the whole vector; the scratch is one
  // chunk (1 MiB) per folding thread.
  using ChunkSource = std::function<void(std::size_t begin, std::span<float> out)>;
  double add_measured(const ChunkSource& values_of, std::uint64_t weight);
  void remove(const ChunkSource& values_of, std::uint64_t weight);

  std::size_t size() const noexcept { return size_; }
  std::size_t count() const noexcept { return count_; }
  std::uint64_t total_weight() const noexcept { return total_weight_; }
  // F: the sum's grid is 2^-F. Valid after begin().
  int fraction_bits() const noexcept { return fraction_bits_; }

  // reference + sum / total_weight, each value rounded once to float. REQUIRES: count() > 0.
  std::vector<float> mean() const;
  // Forgets the round. The sum's memory is kept for the next begin(): a server runs round
  // after round of the same model, and handing 8 bytes per parameter back to the allocator
  // only to fault the same pages in again next round cost more than the zeroing itself. Nor
  // is it zeroed: the next round's first update writes it.
  void clear() noexcept;

  // The grid F for a round of at most `max_total_weight` weight (begin() uses it).
  static int fraction_bits_for(std::uint64_t max_total_weight) noexcept;

 private:
  // Runs body(first_chunk, end_chunk) over every chunk, on the pool when there is one and
  // there is more than one chunk.
  template <class Body>
  void for_chunks(Body&& body) const;
  // The folds, over chunks whose values values_of(begin, length, scratch) points to.
  template <class ValuesOf>
  double add_measured_with(ValuesOf&& values_of, std::uint64_t weight);
  template <class ValuesOf>
  void remove_with(ValuesOf&& values_of, std::uint64_t weight);

  WorkerPool* workers_ = nullptr;
  std::size_t size_;
  std::span<const float> reference_;
  // Σ trunc(w * (x - g) * 2^F), allocated by the run's first begin(); holds the last round's
  // values until this round's first update overwrites them.
  std::vector<std::int64_t> sum_;
  std::uint64_t max_total_weight_ = 0;
  std::uint64_t total_weight_ = 0;
  std::size_t count_ = 0;
  int fraction_bits_ = 0;
  bool begun_ = false;
};

}  // namespace fedcore::federation
