#include "server/federation/fixed_point_mean.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "shared/util/assert.hpp"
#include "shared/util/huge_pages.hpp"
#include "shared/util/worker_pool.hpp"

namespace fedcore::federation {
namespace {

// kMaxDistance = 2^16, and one bit of the int64 is the sign: W_max * 2^16 * 2^F <= 2^62.
constexpr int kRangeBits = 62 - 16;
static_assert(FixedPointMean::kMaxTotalWeight == std::uint64_t{1} << kRangeBits);
constexpr int kFinestGrid = 40;  // finer buys nothing: a float has 24 bits of mantissa
// Below this the grid would be coarser than 1 (W_max above 2^46 samples in one round).
constexpr int kCoarsestGrid = 0;

}  // namespace

int FixedPointMean::fraction_bits_for(std::uint64_t max_total_weight) noexcept {
  // ceil(log2 W): bit_width(W - 1) for W >= 1.
  const int weight_bits =
      static_cast<int>(std::bit_width(std::max<std::uint64_t>(max_total_weight, 1) - 1));
  return std::clamp(kRangeBits - weight_bits, kCoarsestGrid, kFinestGrid);
}

void FixedPointMean::begin(std::span<const float> reference, std::uint64_t max_total_weight) {
  FEDCORE_ASSERT(reference.size() == size_, "FixedPointMean::begin: reference of the wrong size");
  FEDCORE_ASSERT(max_total_weight >= 1 && max_total_weight <= kMaxTotalWeight,
                 "FixedPointMean::begin: max_total_weight out of range");
  reference_ = reference;
  if (sum_.size() < size_) {
    sum_.reserve(size_);  // once per run: clear() keeps the memory
    advise_huge_pages(sum_.data(), size_ * sizeof(sum_[0]));
    sum_.resize(size_);
  }
  // Not zeroed here: the round's first add_measured writes every element instead of adding
  // to it (8 bytes per parameter not written twice: 80 MB a round at 10M parameters).
  max_total_weight_ = max_total_weight;
  total_weight_ = 0;
  count_ = 0;
  fraction_bits_ = fraction_bits_for(max_total_weight);
  begun_ = true;
}

void FixedPointMean::add(std::span<const float> values, std::uint64_t weight) {
  // Valid values give every term in range, so the fused fold adds exactly the truncations
  // a plain fold would; its distance is simply not needed here.
  (void)add_measured(values, weight);
}

namespace {

// The largest term the sum takes from one update: |x - g| <= kMaxDistance and
// w <= W_max give |term| <= W_max * 2^16 * 2^F <= 2^62 (the header's range argument).
constexpr double kMaxTerm = 0x1p62;

// The integer a term adds: in range it is the truncation add() uses; out of range (or NaN,
// which fails both comparisons) 0. A select, not a branch, so the loop vectorises.
inline std::uint64_t term_bits(double term) noexcept {
  const double kept = (term >= -kMaxTerm && term <= kMaxTerm) ? term : 0.0;
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(kept));
}

}  // namespace

namespace {

constexpr std::size_t kLanes = 8;

// What a pass does with the sum besides measuring: nothing, add each term, or write it (the
// round's first update, into a sum that holds the previous round's values).
enum class Fold { none, add, write };

// Σ (x - g)^2 over one chunk in kLanes lane sums, added in lane order; with `sum`, each term
// w (x - g) 2^F (`scale` = w 2^F) is also truncated into it (or written, Fold::write).
template <Fold kFold>
double chunk_pass(const float* x, const float* g, std::size_t n, std::uint64_t* sum,
                  double scale) noexcept {
  double partial[kLanes] = {};
  const std::size_t whole = n - n % kLanes;
  for (std::size_t i = 0; i < whole; i += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) {
      const double d = static_cast<double>(x[i + k]) - static_cast<double>(g[i + k]);
      partial[k] += d * d;
      if constexpr (kFold == Fold::add) {
        sum[i + k] += term_bits(d * scale);
      } else if constexpr (kFold == Fold::write) {
        sum[i + k] = term_bits(d * scale);
      }
    }
  }
  for (std::size_t i = whole; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - static_cast<double>(g[i]);
    partial[i - whole] += d * d;
    if constexpr (kFold == Fold::add) {
      sum[i] += term_bits(d * scale);
    } else if constexpr (kFold == Fold::write) {
      sum[i] = term_bits(d * scale);
    }
  }
  double squared = 0;
  for (double p : partial) {
    squared += p;
  }
  return squared;
}

std::size_t chunk_count(std::size_t n) noexcept {
  return (n + FixedPointMean::kChunkValues - 1) / FixedPointMean::kChunkValues;
}

}  // namespace

template <class Body>
void FixedPointMean::for_chunks(Body&& body) const {
  const std::size_t chunks = chunk_count(size_);
  if (workers_ != nullptr && chunks > 1) {
    workers_->parallel_for(chunks, 1, body);
  } else {
    body(0, chunks);
  }
}

double FixedPointMean::squared_distance(std::span<const float> x,
                                        std::span<const float> g) noexcept {
  const std::size_t n = x.size();
  double squared = 0;
  for (std::size_t begin = 0; begin < n; begin += kChunkValues) {
    squared += chunk_pass<Fold::none>(x.data() + begin, g.data() + begin,
                                      std::min(kChunkValues, n - begin), nullptr, 0);
  }
  return squared;
}

namespace {

// The two ways a fold reads a chunk of an update: where it lies in a whole vector, or made
// into the folding thread's scratch by a ChunkSource.
auto in_place(std::span<const float> values) {
  return [values](std::size_t begin, std::size_t, std::vector<float>&) {
    return values.data() + begin;
  };
}

auto made_by(const FixedPointMean::ChunkSource& values_of) {
  return [&values_of](std::size_t begin, std::size_t length, std::vector<float>& scratch) {
    scratch.resize(length);
    values_of(begin, scratch);
    return static_cast<const float*>(scratch.data());
  };
}

}  // namespace

double FixedPointMean::add_measured(std::span<const float> values, std::uint64_t weight) {
  FEDCORE_ASSERT(values.size() == size_, "FixedPointMean::add_measured: size mismatch");
  return add_measured_with(in_place(values), weight);
}

double FixedPointMean::add_measured(const ChunkSource& values_of, std::uint64_t weight) {
  return add_measured_with(made_by(values_of), weight);
}

template <class ValuesOf>
double FixedPointMean::add_measured_with(ValuesOf&& values_of, std::uint64_t weight) {
  FEDCORE_ASSERT(begun_, "FixedPointMean::add_measured before begin");
  FEDCORE_ASSERT(weight >= 1 && weight <= max_total_weight_ - total_weight_,
                 "FixedPointMean::add_measured: the weight exceeds what begin() was promised");
  // The round's first update writes the sum (begin() leaves it as the last round left it).
  // If remove() takes it back, every element is exactly 0 again, and the next update, first
  // again, writes: the same as adding to 0.
  const bool overwrite = count_ == 0;
  total_weight_ += weight;
  ++count_;
  // w * 2^F as one double: exact (w < 2^46, and 2^F only moves the exponent). Then each
  // term is (x - g) * scale, rounded by the hardware the same way whenever it is computed,
  // and truncated toward zero into the integer sum.
  const double scale = std::ldexp(static_cast<double>(weight), fraction_bits_);
  const float* g = reference_.data();
  // Unsigned: a bad update's terms may wrap the sum until remove() takes them back.
  auto* sum = reinterpret_cast<std::uint64_t*>(sum_.data());
  const std::size_t n = size_;
  // One slot per chunk, summed in chunk order afterwards: the same order as
  // squared_distance, whichever thread measured which chunk.
  std::vector<double> squares(chunk_count(n));
  for_chunks([&](std::size_t first, std::size_t end) {
    std::vector<float> scratch;  // a chunk of decoded values (ChunkSource) on this thread
    for (std::size_t c = first; c < end; ++c) {
      const std::size_t begin = c * kChunkValues;
      const std::size_t length = std::min(kChunkValues, n - begin);
      const float* x = values_of(begin, length, scratch);
      squares[c] = overwrite ? chunk_pass<Fold::write>(x, g + begin, length, sum + begin, scale)
                             : chunk_pass<Fold::add>(x, g + begin, length, sum + begin, scale);
    }
  });
  double squared = 0;
  for (double s : squares) {
    squared += s;
  }
  return squared;
}

void FixedPointMean::remove(std::span<const float> values, std::uint64_t weight) {
  FEDCORE_ASSERT(values.size() == size_, "FixedPointMean::remove: size mismatch");
  remove_with(in_place(values), weight);
}

void FixedPointMean::remove(const ChunkSource& values_of, std::uint64_t weight) {
  remove_with(made_by(values_of), weight);
}

template <class ValuesOf>
void FixedPointMean::remove_with(ValuesOf&& values_of, std::uint64_t weight) {
  FEDCORE_ASSERT(count_ > 0 && weight <= total_weight_,
                 "FixedPointMean::remove: more than was added");
  total_weight_ -= weight;
  --count_;
  const double scale = std::ldexp(static_cast<double>(weight), fraction_bits_);
  const float* g = reference_.data();
  auto* sum = reinterpret_cast<std::uint64_t*>(sum_.data());
  const std::size_t n = size_;
  for_chunks([&](std::size_t first, std::size_t end) {
    std::vector<float> scratch;
    for (std::size_t c = first; c < end; ++c) {
      const std::size_t begin = c * kChunkValues;
      const std::size_t length = std::min(kChunkValues, n - begin);
      const float* x = values_of(begin, length, scratch);
      for (std::size_t i = 0; i < length; ++i) {
        sum[begin + i] -=
            term_bits((static_cast<double>(x[i]) - static_cast<double>(g[begin + i])) * scale);
      }
    }
  });
}

std::vector<float> FixedPointMean::mean() const {
  FEDCORE_ASSERT(count_ > 0, "FixedPointMean::mean: nothing to average");
  // sum * 2^-F / W in double (the sum's conversion rounds, but the sum itself is exact and
  // the same for every order, so this is too), added to the reference, rounded to float.
  const double unit = std::ldexp(1.0, -fraction_bits_) / static_cast<double>(total_weight_);
  std::vector<float> out;
  out.reserve(size_);
  advise_huge_pages(out.data(), size_ * sizeof(float));
  out.resize(size_);
  float* result = out.data();
  for_chunks([&](std::size_t first, std::size_t end) {
    for (std::size_t i = first * kChunkValues; i < std::min(size_, end * kChunkValues); ++i) {
      result[i] = static_cast<float>(static_cast<double>(reference_[i]) +
                                     static_cast<double>(sum_[i]) * unit);
    }
  });
  return out;
}

void FixedPointMean::clear() noexcept {
  reference_ = {};
  // sum_ keeps its memory and its stale values: the next round's first update overwrites them.
  max_total_weight_ = 0;
  total_weight_ = 0;
  count_ = 0;
  fraction_bits_ = 0;
  begun_ = false;
}

}  // namespace fedcore::federation
