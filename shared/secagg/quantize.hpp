// Fixed-point encoding of updates for the 2^32 ring of secure aggregation.
//
// A client encodes the vector weight * delta followed by weight itself (so the server
// can divide the sum of weighted updates by the sum of weights without seeing either
// per client). Every value is clipped to [-c, c] and mapped to [0, q] with stochastic
// rounding (unbiased: E[decode(encode(x))] = x). Decoding a sum of n encodings subtracts
// n * c; its error per coordinate is below n quantization steps (2c/q each).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shared/secagg/plan.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::secagg {

// Encodes values one after another (clip to [-c, c], map to [0, q], round stochastically),
// for callers that encode block by block; encode_weighted and encode_values are loops over
// it. Each 64-bit draw of `rng` gives two 32-bit rounding uniforms (a rounding bias below
// 2^-32 of a step). Keeps references to plan and rng: both must outlive it.
class Encoder {
 public:
  Encoder(const RoundPlan& plan, Rng& rng) noexcept;
  std::uint32_t operator()(double x) noexcept;

 private:
  double clip_;
  double scale_;   // q / 2c
  double offset_;  // c * q / 2c
  double top_;     // q
  Rng& rng_;
  std::uint64_t bits_ = 0;
  bool has_half_ = false;
};

// out[i] = encode(weight * delta[i]) for i < d, out[d] = encode(weight).
// REQUIRES: out.size() == delta.size() + 1, 0 < weight <= 1.
void encode_weighted(std::span<const float> delta, double weight, const RoundPlan& plan, Rng& rng,
                     std::span<std::uint32_t> out);

// out[i] = encode(values[i]): metrics summed beside the update (already weighted).
void encode_values(std::span<const double> values, const RoundPlan& plan, Rng& rng,
                   std::span<std::uint32_t> out);
// The sums of `clients` encoded values.
std::vector<double> decode_values(std::span<const std::uint32_t> sum, std::uint32_t clients,
                                  const RoundPlan& plan);

// The weighted mean sum_i w_i delta_i / sum_i w_i from the sum of `clients` encodings.
// REQUIRES: out.size() + 1 == sum.size(). Returns the decoded sum of weights (> 0 when
// at least one client contributed).
double decode_weighted_mean(std::span<const std::uint32_t> sum, std::uint32_t clients,
                            const RoundPlan& plan, std::span<float> out);

}  // namespace fedcore::secagg
