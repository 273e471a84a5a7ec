#include "shared/secagg/quantize.hpp"

#include <algorithm>
#include <cmath>

#include "shared/util/assert.hpp"

namespace fedcore::secagg {
Encoder::Encoder(const RoundPlan& plan, Rng& rng) noexcept
    : clip_(plan.clip_range),
      scale_(double(plan.quant_range) / (2 * plan.clip_range)),
      offset_(plan.clip_range * (double(plan.quant_range) / (2 * plan.clip_range))),
      top_(double(plan.quant_range)),
      rng_(rng) {}

std::uint32_t Encoder::operator()(double x) noexcept {
  const double scaled = std::clamp(x, -clip_, clip_) * scale_ + offset_;  // in [0, q]
  const double floor = std::floor(scaled);
  // Stochastic rounding: up with probability equal to the fraction. The fraction needs no
  // more than 32 bits of randomness, so one generator call serves two values.
  std::uint32_t draw;
  if (has_half_) {
    draw = static_cast<std::uint32_t>(bits_ >> 32);
  } else {
    bits_ = rng_.next_u64();
    draw = static_cast<std::uint32_t>(bits_);
  }
  has_half_ = !has_half_;
  const double up = double(draw) * 0x1p-32 < scaled - floor ? 1.0 : 0.0;
  return static_cast<std::uint32_t>(std::min(floor + up, top_));
}

void encode_weighted(std::span<const float> delta, double weight, const RoundPlan& plan, Rng& rng,
                     std::span<std::uint32_t> out) {
  FEDCORE_ASSERT(out.size() == delta.size() + 1, "encode_weighted: out must hold d + 1 values");
  FEDCORE_ASSERT(weight > 0 && weight <= 1, "encode_weighted: weight in (0, 1]");
  Encoder encode(plan, rng);
  for (std::size_t i = 0; i < delta.size(); ++i) {
    out[i] = encode(weight * double(delta[i]));
  }
  out[delta.size()] = encode(weight);
}

void encode_values(std::span<const double> values, const RoundPlan& plan, Rng& rng,
                   std::span<std::uint32_t> out) {
  FEDCORE_ASSERT(out.size() == values.size(), "encode_values: one word per value");
  Encoder encode(plan, rng);
  for (std::size_t i = 0; i < values.size(); ++i) {
    out[i] = encode(values[i]);
  }
}

std::vector<double> decode_values(std::span<const std::uint32_t> sum, std::uint32_t clients,
                                  const RoundPlan& plan) {
  const double step = quantization_step(plan);
  const double offset = double(clients) * plan.clip_range;
  std::vector<double> out;
  out.reserve(sum.size());
  for (auto word : sum) {
    out.push_back(double(word) * step - offset);
  }
  return out;
}

double decode_weighted_mean(std::span<const std::uint32_t> sum, std::uint32_t clients,
                            const RoundPlan& plan, std::span<float> out) {
  FEDCORE_ASSERT(out.size() + 1 == sum.size(), "decode_weighted_mean: sum holds d + 1 values");
  const double step = quantization_step(plan);
  const double offset = double(clients) * plan.clip_range;
  const double total_weight = double(sum[out.size()]) * step - offset;
  // Clients are at least... the weight sum of a successful round is positive; guard the
  // division anyway (an all-zero sum decodes to a zero update).
  const double divisor = total_weight > 0 ? total_weight : 1.0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<float>((double(sum[i]) * step - offset) / divisor);
  }
  return total_weight;
}

}  // namespace fedcore::secagg
