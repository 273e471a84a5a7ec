// The masking graph of a SecAgg+ round (Bell et al. 2020): a k-regular Harary graph over
// the clients, laid out in a random order, so each client shares masks and secrets with
// k neighbours instead of all n - 1.
#pragma once

#include <cstdint>
#include <vector>

#include "shared/util/rng.hpp"

namespace fedcore::secagg {

// neighbours[i] lists the nodes adjacent to node i (sorted, never i itself). Positions
// come from a shuffle by `rng`; node at position p is joined to positions p ± 1 ... p ±
// k/2 (mod n). REQUIRES: n >= 2, 1 <= k <= n - 1, k even unless k == n - 1 (complete).
std::vector<std::vector<std::uint32_t>> harary_graph(std::uint32_t n, std::uint32_t k, Rng& rng);

}  // namespace fedcore::secagg
