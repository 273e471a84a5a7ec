#include "shared/secagg/quantize.hpp"

#include <algorithm>
#include <cmath>

#include "shared/util/assert.hpp"

namespace fedcore::secagg {
namespace {

std::uint32_t encode(double x, const RoundPlan& plan, Rng& rng) {
  const double c = plan.clip_range;
  const double q = double(plan.quant_range);
  const double scaled = (std::clamp(x, -c, c) + c) * (q / (2 * c));  // in [0, q]
  const double floor = std::floor(scaled);
  // Stochastic rounding: up with probability equal to the fraction.
  const double up = rng.uniform_double() < scaled - floor ? 1.0 : 0.0;
  return static_cast<std::uint32_t>(std::min(floor + up, q));
}

}  // namespace

void encode_weighted(std::span<const float> delta, double weight, const RoundPlan& plan, Rng& rng,
                     std::span<std::uint32_t> out) {
  FEDCORE_ASSERT(out.size() == delta.size() + 1, "encode_weighted: out must hold d + 1 values");
  FEDCORE_ASSERT(weight > 0 && weight <= 1, "encode_weighted: weight in (0, 1]");
  for (std::size_t i = 0; i < delta.size(); ++i) {
    out[i] = encode(weight * double(delta[i]), plan, rng);
  }
  out[delta.size()] = encode(weight, plan, rng);
}

void encode_values(std::span<const double> values, const RoundPlan& plan, Rng& rng,
                   std::span<std::uint32_t> out) {
  FEDCORE_ASSERT(out.size() == values.size(), "encode_values: one word per value");
  for (std::size_t i = 0; i < values.size(); ++i) {
    out[i] = encode(values[i], plan, rng);
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
