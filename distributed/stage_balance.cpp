#include "distributed/stage_balance.hpp"

#include <chrono>
#include <limits>

#include "distributed/layer_stack.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::distributed {

// Linear partition by dynamic programming: best[k][i] is the smallest possible largest
// stage cost when the first i layers form k stages. Models have tens of layers, so the
// O(stages × layers²) table is tiny.
std::vector<std::size_t> balance_stages(std::span<const double> costs, std::size_t stages) {
  const std::size_t n = costs.size();
  FEDCORE_ASSERT(stages >= 1 && stages <= n, "need 1 <= stages <= layers");
  std::vector<double> prefix(n + 1, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + costs[i];
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<std::size_t>> cut(stages + 1, std::vector<std::size_t>(n + 1, 0));
  best[0][0] = 0;
  for (std::size_t k = 1; k <= stages; ++k) {
    for (std::size_t i = k; i <= n; ++i) {
      for (std::size_t j = k - 1; j < i; ++j) {
        const double candidate = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (candidate < best[k][i]) {
          best[k][i] = candidate;
          cut[k][i] = j;
        }
      }
    }
  }
  std::vector<std::size_t> bounds(stages + 1);
  bounds[stages] = n;
  for (std::size_t k = stages; k > 0; --k)
    bounds[k - 1] = cut[k][bounds[k]];
  return bounds;
}

std::vector<double> parameter_costs(const model::Model& model) {
  std::vector<double> costs;
  for (std::size_t i = 0; i < model.layer_count(); ++i) {
    double n = 0;
    for (const auto& p : model.layer(i).param_shapes())
      n += static_cast<double>(model::element_count(p.shape));
    costs.push_back(std::max(n, 1.0));
  }
  return costs;
}

std::vector<double> measured_costs(const model::Model& model, int batch) {
  std::vector<double> costs;
  Matrix input = Matrix::Random(static_cast<Eigen::Index>(model.input_size()), batch);
  for (std::size_t i = 0; i < model.layer_count(); ++i) {
    LayerStack layer(model, i, i + 1);
    const Matrix output = layer.forward(input, model::Phase::train);
    Matrix grad_in;
    double best = std::numeric_limits<double>::infinity();
    for (int rep = 0; rep < 3; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      layer.forward(input, model::Phase::train);
      layer.backward(output, &grad_in);
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    costs.push_back(best);
    input = output;
  }
  return costs;
}

}  // namespace fedcore::distributed
