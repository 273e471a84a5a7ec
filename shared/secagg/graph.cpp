#include "shared/secagg/graph.hpp"

#include <algorithm>
#include <numeric>
#include <span>

#include "shared/util/assert.hpp"

namespace fedcore::secagg {

std::vector<std::vector<std::uint32_t>> harary_graph(std::uint32_t n, std::uint32_t k, Rng& rng) {
  FEDCORE_ASSERT(n >= 2 && k >= 1 && k <= n - 1 && (k % 2 == 0 || k == n - 1),
                 "harary_graph: k must be even and below n, or n - 1");
  std::vector<std::vector<std::uint32_t>> neighbours(n);
  if (k == n - 1) {
    for (std::uint32_t i = 0; i < n; ++i) {
      for (std::uint32_t j = 0; j < n; ++j) {
        if (i != j) {
          neighbours[i].push_back(j);
        }
      }
    }
    return neighbours;
  }
  // node_at[p]: the node placed at ring position p.
  std::vector<std::uint32_t> node_at(n);
  std::iota(node_at.begin(), node_at.end(), 0u);
  rng.shuffle(std::span(node_at));
  for (std::uint32_t p = 0; p < n; ++p) {
    for (std::uint32_t d = 1; d <= k / 2; ++d) {
      neighbours[node_at[p]].push_back(node_at[(p + d) % n]);
      neighbours[node_at[p]].push_back(node_at[(p + n - d) % n]);
    }
  }
  for (auto& list : neighbours) {
    std::sort(list.begin(), list.end());
  }
  return neighbours;
}

}  // namespace fedcore::secagg
