// Robust aggregation: rules that make the next global model from n client updates while
// some of the clients send arbitrary (Byzantine) vectors. These are the algorithms alone,
// over the round's updates held in an UpdateBuffer; robust_strategy.hpp wraps them as
// Strategy objects, and docs/strategies.md ("Robust aggregation") compares them.
//
// Every update is a full parameter vector (a client's locally trained model) of dim
// floats. The rules are unweighted: each update counts once, whatever sample count its
// client reports. A weight would be a claim the server cannot check, and the fault
// tolerances below count clients: with weights, one faulty client claiming many samples
// would carry the say of many.
//
// Work is done in blocks of kCoordinateBlock coordinates: a block of every update is read
// (each row sequentially, so a row in the scratch file streams from the page cache) and,
// for the coordinate-wise rules, transposed into a scratch array of n * kCoordinateBlock
// floats, where each coordinate's n values are sorted or selected. After each block the
// spilled rows' pages of it are released (UpdateBuffer::release_spilled), so a pass over a
// round in a scratch file keeps at most about 2 MiB of every spilled row resident, and none
// after it. Sums are doubles.
//
// Costs below: n updates of d coordinates, f the faulty clients the rule is set to
// tolerate. "Extra memory" excludes the buffer and the output.
//
// Thread safety: the functions are pure; they may run at once on different outputs.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "server/federation/update_buffer.hpp"

namespace fedcore::federation {

// Coordinates per block; the scratch of the coordinate-wise rules is n * kCoordinateBlock
// floats (1.6 MB for 100 updates).
inline constexpr std::size_t kCoordinateBlock = 4096;

// Coordinate-wise median: out[c] = the median of the n values of coordinate c; for even n
// the mean of the two middle values (in double, then rounded to float). The same bits
// whatever order the updates were added in.
// Tolerates: f < n / 2 faulty updates (each coordinate stays within the range of honest
// values).
// Time O(n d) (selection, not sorting); extra memory O(n * kCoordinateBlock).
// REQUIRES: updates.size() >= 1; out.size() == updates.dim().
void coordinate_median(const UpdateBuffer& updates, std::span<float> out);

// Coordinate-wise trimmed mean: per coordinate, the k = floor(beta * n) smallest and the k
// largest values are dropped and the other n - 2k averaged (in sorted order, so the same
// bits whatever order the updates were added in).
// Tolerates: f <= floor(beta * n) faulty updates.
// Time O(d n log n); extra memory O(n * kCoordinateBlock).
// REQUIRES: 0 <= beta < 0.5; updates.size() >= 1; out.size() == updates.dim().
void trimmed_mean(const UpdateBuffer& updates, double beta, std::span<float> out);

// The n x n squared L2 distances between the updates (row-major, symmetric, zero diagonal),
// summed in double block by block. Time O(n^2 d); extra memory O(n^2) doubles.
std::vector<double> pairwise_squared_distances(const UpdateBuffer& updates);

// Krum's scores (Blanchard et al. 2017, "Machine Learning with Adversaries: Byzantine
// Tolerant Gradient Descent"): update i's score is the sum of its squared distances to the
// n - f - 2 updates closest to it (itself excluded). A low score: i sits in a dense group.
// Time O(n^2 d + n^2 log n); extra memory O(n^2) doubles.
// REQUIRES: n > 2f + 2.
std::vector<double> krum_scores(const UpdateBuffer& updates, std::size_t f);

// Krum (m = 1) and Multi-Krum (m > 1): the m updates with the lowest scores, best first
// (equal scores: the lower index first).
// Tolerates: f faulty updates when n > 2f + 2 (the chosen updates' distance from the honest
// ones is bounded); Multi-Krum averages m <= n - f of them.
// Time O(n^2 d); extra memory O(n^2) doubles.
// REQUIRES: n > 2f + 2; 1 <= m <= n - f.
std::vector<std::size_t> krum_select(const UpdateBuffer& updates, std::size_t f, std::size_t m);

// The plain mean of the given rows (Multi-Krum's average; a single row is copied exactly).
// Time O(|rows| d); extra memory O(kCoordinateBlock) doubles.
// REQUIRES: rows non-empty, each < updates.size(); out.size() == updates.dim().
void mean_of_rows(const UpdateBuffer& updates, std::span<const std::size_t> rows,
                  std::span<float> out);

// Bulyan (El Mhamdi, Guerraoui, Rouault 2018, "The Hidden Vulnerability of Distributed
// Learning in Byzantium"). First theta = n - 2f updates are chosen by Krum applied again and
// again: each step takes the best-scored update of those left and removes it, a score
// counting the |R| - f - 2 closest others of the |R| left (at least 1 while another is
// left: the last steps of a small f would otherwise count none). Then per coordinate the
// beta = theta - 2f of the chosen values closest to their median are averaged (equally
// close values on both sides: the lower one first).
// Tolerates: f faulty updates when n >= 4f + 3, and, unlike Krum, bounds each coordinate.
// Time O(n^2 d) for the distances, O(n^3 log n) for the selection, O(d theta log theta)
// for the coordinates; extra memory O(n^2) doubles + O(theta * kCoordinateBlock) floats.
// REQUIRES: n >= 4f + 3; out.size() == updates.dim().
void bulyan(const UpdateBuffer& updates, std::size_t f, std::span<float> out);

// Centered clipping (Karimireddy, He, Jaggi 2021, "Learning from History for Byzantine
// Robust Optimization"), from v_0 = global (the round's model), `iterations` times:
//
//   v_{l+1} = v_l + (1/n) sum_i (x_i - v_l) * min(1, tau / ||x_i - v_l||)
//
// so no update moves a step by more than tau / n, however far it is. Result: v_L.
// Tolerates: a fraction of faulty updates below about 0.1 in the paper's analysis (with tau
// set from the honest updates' spread); any one update's pull is bounded by tau / n per
// iteration, so f faulty updates move the result at most f * tau * L / n.
// Time O(L n d) (two passes per iteration: the distances, then the step); extra memory
// O(n + kCoordinateBlock) doubles.
// REQUIRES: updates.size() >= 1; tau > 0; iterations >= 1; global.size() == out.size() ==
// updates.dim().
void centered_clipping(const UpdateBuffer& updates, std::span<const float> global, double tau,
                       std::size_t iterations, std::span<float> out);

// Centered clipping's single iteration (L = 1) folded one update at a time, for a server
// that need not keep the updates: every term (x_i - v_0) * min(1, tau / ||x_i - v_0||) is
// added to a sum of doubles as the update arrives. The same bits as centered_clipping with
// iterations = 1 over the same updates in the same order.
// Memory: d doubles from the first begin() on, kept between rounds.
class ClippedStepSum {
 public:
  // Starts a sum around `center` (v_0, of d values) with radius tau. REQUIRES: tau > 0;
  // `center` stays alive and unchanged until finish().
  void begin(std::span<const float> center, double tau);
  // REQUIRES: begin() was called; update.size() == d.
  void add(std::span<const float> update);
  std::size_t count() const noexcept { return count_; }
  // v_1 = v_0 + sum / count. REQUIRES: count() >= 1; out.size() == d.
  void finish(std::span<float> out) const;

 private:
  std::vector<double> sum_;
  std::span<const float> center_;
  double tau_ = 0;
  std::size_t count_ = 0;
};

}  // namespace fedcore::federation
