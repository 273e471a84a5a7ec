#include "server/federation/robust_aggregation.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "shared/util/assert.hpp"

namespace fedcore::federation {
namespace {

std::size_t block_size(std::size_t first, std::size_t dim) noexcept {
  return std::min(kCoordinateBlock, dim - first);
}

std::vector<std::size_t> all_rows(std::size_t n) {
  std::vector<std::size_t> rows(n);
  std::iota(rows.begin(), rows.end(), std::size_t{0});
  return rows;
}

// Σ (x - y)^2 in double, in four lanes added in a fixed order: fast enough to vectorize and
// the same bits on every call over the same values. Whole-vector distances are summed
// block by block in block order (squared_distance), so a pass over a buffer, which reads
// one block of every row at a time, adds exactly what a pass over one row adds.
double block_squared_distance(std::span<const float> x, std::span<const float> y) noexcept {
  double lane[4] = {0, 0, 0, 0};
  std::size_t c = 0;
  for (; c + 4 <= x.size(); c += 4) {
    for (std::size_t k = 0; k < 4; ++k) {
      const double d = double(x[c + k]) - double(y[c + k]);
      lane[k] += d * d;
    }
  }
  for (; c < x.size(); ++c) {
    const double d = double(x[c]) - double(y[c]);
    lane[0] += d * d;
  }
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

double squared_distance(std::span<const float> x, std::span<const float> y) noexcept {
  double sum = 0;
  for (std::size_t first = 0; first < x.size(); first += kCoordinateBlock) {
    const std::size_t count = block_size(first, x.size());
    sum += block_squared_distance(x.subspan(first, count), y.subspan(first, count));
  }
  return sum;
}

// values[c * rows.size() + r] = row rows[r], coordinate first + c: each row is read in order,
// and each coordinate's values end up side by side for sorting.
void gather_block(const UpdateBuffer& updates, std::span<const std::size_t> rows, std::size_t first,
                  std::size_t count, std::span<float> values) {
  const std::size_t n = rows.size();
  for (std::size_t r = 0; r < n; ++r) {
    const auto x = updates.row(rows[r]).subspan(first, count);
    for (std::size_t c = 0; c < count; ++c) {
      values[c * n + r] = x[c];
    }
  }
}

// out[c] = reduce(the values of coordinate c in `rows`), block by block. `reduce` may
// reorder the values it is given.
template <class Reduce>
void reduce_coordinates(const UpdateBuffer& updates, std::span<const std::size_t> rows,
                        std::span<float> out, Reduce reduce) {
  const std::size_t n = rows.size();
  std::vector<float> values(n * std::min(kCoordinateBlock, updates.dim()));
  for (std::size_t first = 0; first < updates.dim(); first += kCoordinateBlock) {
    const std::size_t count = block_size(first, updates.dim());
    gather_block(updates, rows, first, count, values);
    for (std::size_t c = 0; c < count; ++c) {
      out[first + c] = reduce(std::span<float>(values).subspan(c * n, n));
    }
    updates.release_spilled(first, count);
  }
}

// The median of sorted values, in double: for an even count the mean of the middle two.
double sorted_median(std::span<const float> sorted) noexcept {
  const std::size_t mid = sorted.size() / 2;
  if (sorted.size() % 2 == 1) {
    return sorted[mid];
  }
  return (double(sorted[mid - 1]) + double(sorted[mid])) / 2;
}

// Selection instead of a sort: nth_element puts the upper middle value in place and the
// smaller ones before it, the largest of which is the lower middle.
float median_of(std::span<float> values) {
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(mid), values.end());
  if (values.size() % 2 == 1) {
    return values[mid];
  }
  const float lower = *std::max_element(values.begin(), values.begin() + std::ptrdiff_t(mid));
  return static_cast<float>((double(lower) + double(values[mid])) / 2);
}

// A full sort, not two selections: summing the kept values in sorted order makes the
// result independent of the order the updates arrived in.
float trimmed_mean_of(std::span<float> values, std::size_t trim) {
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (std::size_t i = trim; i < values.size() - trim; ++i) {
    sum += values[i];
  }
  return static_cast<float>(sum / double(values.size() - 2 * trim));
}

// The `keep` values closest to the median of sorted values are a contiguous run of them:
// grown from where the median falls, one value at a time from the closer side (the lower
// side when both are as close).
float closest_to_median_mean(std::span<float> values, std::size_t keep) {
  std::sort(values.begin(), values.end());
  const double median = sorted_median(values);
  const std::size_t n = values.size();
  auto lo =
      static_cast<std::size_t>(std::lower_bound(values.begin(), values.end(), median,
                                                [](float v, double m) { return double(v) < m; }) -
                               values.begin());
  std::size_t hi = lo;
  while (hi - lo < keep) {
    const bool take_lower = lo > 0 && (hi == n || median - values[lo - 1] <= values[hi] - median);
    if (take_lower) {
      --lo;
    } else {
      ++hi;
    }
  }
  double sum = 0;
  for (std::size_t i = lo; i < hi; ++i) {
    sum += values[i];
  }
  return static_cast<float>(sum / double(keep));
}

// Each score sums the `neighbours` smallest distances to the other active updates, in
// ascending order (a fixed order, so equal inputs give equal scores).
std::vector<double> scores_among(const std::vector<double>& distances, std::size_t n,
                                 std::span<const std::size_t> active, std::size_t neighbours) {
  std::vector<double> scores;
  std::vector<double> others;
  scores.reserve(active.size());
  for (const std::size_t i : active) {
    others.clear();
    for (const std::size_t j : active) {
      if (j != i) {
        others.push_back(distances[i * n + j]);
      }
    }
    const auto counted = others.begin() + std::ptrdiff_t(neighbours);
    std::partial_sort(others.begin(), counted, others.end());
    scores.push_back(std::accumulate(others.begin(), counted, 0.0));
  }
  return scores;
}

// Positions 0 .. scores.size() - 1, lowest score first, equal scores by position.
std::vector<std::size_t> by_score(const std::vector<double>& scores) {
  auto order = all_rows(scores.size());
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return scores[a] < scores[b]; });
  return order;
}

// Bulyan's neighbour count for |R| = left updates: Krum's left - f - 2, but at least one
// while another update is left. n >= 4f + 3 keeps left - f - 2 >= 1 until left < 2f + 3,
// which the last steps of a small f reach.
std::size_t bulyan_neighbours(std::size_t left, std::size_t f) noexcept {
  const std::size_t krum = left > f + 2 ? left - f - 2 : 1;
  return std::min(krum, left - 1);
}

std::vector<std::size_t> bulyan_selection(const UpdateBuffer& updates, std::size_t f) {
  const std::size_t n = updates.size();
  const auto distances = pairwise_squared_distances(updates);
  auto active = all_rows(n);
  std::vector<std::size_t> chosen;
  while (chosen.size() < n - 2 * f) {
    const auto scores = scores_among(distances, n, active, bulyan_neighbours(active.size(), f));
    const std::size_t best = by_score(scores).front();
    chosen.push_back(active[best]);
    active.erase(active.begin() + std::ptrdiff_t(best));
  }
  return chosen;
}

double clip_scale(double squared_distance, double tau) noexcept {
  const double distance = std::sqrt(squared_distance);
  return distance <= tau ? 1.0 : tau / distance;
}

// The two steps shared by ClippedStepSum and centered_clipping, kept out of line so that
// both run the very same instructions and give the same bits.
[[gnu::noinline]] void fold_clipped(std::span<double> sum, std::span<const float> x,
                                    std::span<const float> center, double scale) noexcept {
  for (std::size_t c = 0; c < sum.size(); ++c) {
    sum[c] += scale * (double(x[c]) - double(center[c]));
  }
}

[[gnu::noinline]] void finish_clipped(std::span<const double> sum, std::span<const float> center,
                                      std::size_t count, std::span<float> out) noexcept {
  for (std::size_t c = 0; c < sum.size(); ++c) {
    out[c] = static_cast<float>(double(center[c]) + sum[c] / double(count));
  }
}

// squared[i] = ||x_i - center||^2, block by block.
std::vector<double> squared_distances_to(const UpdateBuffer& updates,
                                         std::span<const float> center) {
  std::vector<double> squared(updates.size(), 0.0);
  for (std::size_t first = 0; first < updates.dim(); first += kCoordinateBlock) {
    const std::size_t count = block_size(first, updates.dim());
    for (std::size_t i = 0; i < updates.size(); ++i) {
      squared[i] += block_squared_distance(updates.row(i).subspan(first, count),
                                           center.subspan(first, count));
    }
    updates.release_spilled(first, count);
  }
  return squared;
}

// One iteration, in place: the scales come from the old center, and each block of the
// center is read before it is overwritten.
void clipping_step(const UpdateBuffer& updates, double tau, std::span<float> center) {
  std::vector<double> scales = squared_distances_to(updates, center);
  for (auto& s : scales) {
    s = clip_scale(s, tau);
  }
  std::vector<double> sum(std::min(kCoordinateBlock, updates.dim()));
  for (std::size_t first = 0; first < updates.dim(); first += kCoordinateBlock) {
    const std::size_t count = block_size(first, updates.dim());
    const auto block = center.subspan(first, count);
    const auto block_sum = std::span<double>(sum).first(count);
    std::fill(block_sum.begin(), block_sum.end(), 0.0);
    for (std::size_t i = 0; i < updates.size(); ++i) {
      fold_clipped(block_sum, updates.row(i).subspan(first, count), block, scales[i]);
    }
    finish_clipped(block_sum, block, updates.size(), block);
    updates.release_spilled(first, count);
  }
}

}  // namespace

void coordinate_median(const UpdateBuffer& updates, std::span<float> out) {
  FEDCORE_ASSERT(updates.size() >= 1, "coordinate_median: no updates");
  FEDCORE_ASSERT(out.size() == updates.dim(), "coordinate_median: output size");
  reduce_coordinates(updates, all_rows(updates.size()), out, median_of);
}

void trimmed_mean(const UpdateBuffer& updates, double beta, std::span<float> out) {
  FEDCORE_ASSERT(beta >= 0 && beta < 0.5, "trimmed_mean: beta outside [0, 0.5)");
  FEDCORE_ASSERT(updates.size() >= 1, "trimmed_mean: no updates");
  FEDCORE_ASSERT(out.size() == updates.dim(), "trimmed_mean: output size");
  const auto trim = static_cast<std::size_t>(std::floor(beta * double(updates.size())));
  reduce_coordinates(updates, all_rows(updates.size()), out,
                     [trim](std::span<float> values) { return trimmed_mean_of(values, trim); });
}

// Pairs are taken within a block, so each block of every row is read from memory (or the
// page cache) once and then reused from the CPU cache for its n - 1 partners.
std::vector<double> pairwise_squared_distances(const UpdateBuffer& updates) {
  const std::size_t n = updates.size();
  std::vector<double> distances(n * n, 0.0);
  for (std::size_t first = 0; first < updates.dim(); first += kCoordinateBlock) {
    const std::size_t count = block_size(first, updates.dim());
    for (std::size_t i = 0; i < n; ++i) {
      const auto xi = updates.row(i).subspan(first, count);
      for (std::size_t j = i + 1; j < n; ++j) {
        distances[i * n + j] += block_squared_distance(xi, updates.row(j).subspan(first, count));
      }
    }
    updates.release_spilled(first, count);
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      distances[j * n + i] = distances[i * n + j];
    }
  }
  return distances;
}

std::vector<double> krum_scores(const UpdateBuffer& updates, std::size_t f) {
  const std::size_t n = updates.size();
  FEDCORE_ASSERT(n > 2 * f + 2, "krum_scores: needs n > 2f + 2");
  return scores_among(pairwise_squared_distances(updates), n, all_rows(n), n - f - 2);
}

std::vector<std::size_t> krum_select(const UpdateBuffer& updates, std::size_t f, std::size_t m) {
  FEDCORE_ASSERT(updates.size() > 2 * f + 2, "krum_select: needs n > 2f + 2");
  FEDCORE_ASSERT(m >= 1 && m <= updates.size() - f, "krum_select: needs 1 <= m <= n - f");
  auto order = by_score(krum_scores(updates, f));
  order.resize(m);
  return order;
}

void mean_of_rows(const UpdateBuffer& updates, std::span<const std::size_t> rows,
                  std::span<float> out) {
  FEDCORE_ASSERT(!rows.empty(), "mean_of_rows: no rows");
  FEDCORE_ASSERT(out.size() == updates.dim(), "mean_of_rows: output size");
  std::vector<double> sum(std::min(kCoordinateBlock, updates.dim()));
  for (std::size_t first = 0; first < updates.dim(); first += kCoordinateBlock) {
    const std::size_t count = block_size(first, updates.dim());
    std::fill(sum.begin(), sum.end(), 0.0);
    for (const std::size_t r : rows) {
      const auto x = updates.row(r).subspan(first, count);
      for (std::size_t c = 0; c < count; ++c) {
        sum[c] += x[c];
      }
    }
    for (std::size_t c = 0; c < count; ++c) {
      out[first + c] = static_cast<float>(sum[c] / double(rows.size()));
    }
    updates.release_spilled(first, count);
  }
}

void bulyan(const UpdateBuffer& updates, std::size_t f, std::span<float> out) {
  FEDCORE_ASSERT(updates.size() >= 4 * f + 3, "bulyan: needs n >= 4f + 3");
  FEDCORE_ASSERT(out.size() == updates.dim(), "bulyan: output size");
  const auto chosen = bulyan_selection(updates, f);
  const std::size_t keep = chosen.size() - 2 * f;
  reduce_coordinates(updates, chosen, out, [keep](std::span<float> values) {
    return closest_to_median_mean(values, keep);
  });
}

void centered_clipping(const UpdateBuffer& updates, std::span<const float> global, double tau,
                       std::size_t iterations, std::span<float> out) {
  FEDCORE_ASSERT(updates.size() >= 1, "centered_clipping: no updates");
  FEDCORE_ASSERT(tau > 0 && iterations >= 1, "centered_clipping: needs tau > 0, L >= 1");
  FEDCORE_ASSERT(global.size() == updates.dim() && out.size() == updates.dim(),
                 "centered_clipping: sizes");
  std::copy(global.begin(), global.end(), out.begin());
  for (std::size_t l = 0; l < iterations; ++l) {
    clipping_step(updates, tau, out);
  }
}

void ClippedStepSum::begin(std::span<const float> center, double tau) {
  FEDCORE_ASSERT(tau > 0, "ClippedStepSum::begin: tau must be above 0");
  sum_.assign(center.size(), 0.0);
  center_ = center;
  tau_ = tau;
  count_ = 0;
}

void ClippedStepSum::add(std::span<const float> update) {
  FEDCORE_ASSERT(tau_ > 0, "ClippedStepSum::add: no begin()");
  FEDCORE_ASSERT(update.size() == sum_.size(), "ClippedStepSum::add: update size");
  fold_clipped(sum_, update, center_, clip_scale(squared_distance(update, center_), tau_));
  ++count_;
}

void ClippedStepSum::finish(std::span<float> out) const {
  FEDCORE_ASSERT(count_ >= 1, "ClippedStepSum::finish: no updates");
  FEDCORE_ASSERT(out.size() == sum_.size(), "ClippedStepSum::finish: output size");
  finish_clipped(sum_, center_, count_, out);
}

}  // namespace fedcore::federation
