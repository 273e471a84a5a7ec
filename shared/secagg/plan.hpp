// The numbers of one SecAgg+ round: how many clients, how many neighbours each has in the
// masking graph (k), how many of them must answer to remove a dropout's masks (t), and
// the fixed-point encoding of the updates.
//
// Choices and their reasons (Bell et al. 2020, §3-4):
//   k  about 3·log2(n), even (a Harary graph needs it), at most n - 1 (then every client
//      neighbours every other, which is Bonawitz et al. 2017's complete graph);
//   t  a strict majority of k, floor(k/2) + 1 by default. t > k/2 is required, not just a
//      default: a client reveals only one kind of secret per neighbour, and with t > k/2
//      a server that tells half the neighbours "u dropped" and the other half "u survived"
//      cannot collect t shares of both of u's secrets;
//   ring 2^32 (the upload is the same size as float32 parameters); every coordinate of a
//      client's (weighted) update is clipped to [-clip_range, clip_range] and quantized to
//      [0, quant_range]; quant_range is lowered so that n * quant_range < 2^32 and the sum
//      of n inputs can never wrap.
#pragma once

#include <cstdint>

#include "shared/util/error.hpp"

namespace fedcore::secagg {

// What a run asks for (zeros: choose).
struct SecAggSettings {
  std::uint32_t degree = 0;     // k
  std::uint32_t threshold = 0;  // t
  double clip_range = 8.0;
  std::uint32_t quant_range = 1u << 22;
};

struct RoundPlan {
  std::uint32_t clients = 0;  // n, selected for the round
  std::uint32_t degree = 0;   // k
  std::uint32_t threshold = 0;
  double clip_range = 8.0;
  std::uint32_t quant_range = 1u << 22;  // after lowering for n
  // A client's update is weighted min(samples, weight_cap) / weight_cap, in (0, 1]: the
  // admin's per-client cap, or the largest sample count a selected client declared.
  std::uint64_t weight_cap = 1;
  // Keys must be signed with certificates of the federation CA. A site that holds the CA
  // checks its neighbours' keys whatever this says (the server cannot switch that off);
  // this makes the server refuse unsigned keys and a site without the CA refuse to join.
  bool bind_keys = false;
  // Values summed after the weight: 3 with federated evaluation (e·loss, e·accuracy, e,
  // where e = min(test samples, cap) / cap), else 0. Clipped to ±clip_range like the rest.
  std::uint32_t metric_slots = 0;
  // The fewest clients whose masked inputs may be unmasked as a sum; 0 means the threshold.
  // Distributed DP sizes each site's noise share for it (privacy/distributed_dp.hpp), so a
  // larger value (the run's quorum) means less noise per site; it is enforced where it
  // matters: a site signs only a survivor list at least this long, so a sum with fewer
  // survivors (under-noised) can never be unmasked, whatever the server claims.
  std::uint32_t min_survivors = 0;
};

// max(threshold, min_survivors): the survivors a round needs at least, from masking on.
std::uint32_t required_survivors(const RoundPlan& plan) noexcept;

// The plan for `clients` selected clients. Errors: invalid_argument when clients < 3
// (with two, each learns the other's update from the sum), when an explicit degree or
// threshold is impossible (t <= k/2, t > k, k >= n), when clip_range is not positive and
// finite, or when quant_range < 2.
result<RoundPlan> plan_round(std::uint32_t clients, const SecAggSettings& settings);

// The largest error one client's quantization adds to one coordinate: one step.
double quantization_step(const RoundPlan& plan) noexcept;

}  // namespace fedcore::secagg
