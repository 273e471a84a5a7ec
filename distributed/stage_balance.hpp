// Splitting a model's layers into pipeline stages.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "shared/model/model.hpp"

namespace fedcore::distributed {

// Cuts `costs` (one per layer, in order) into `stages` contiguous non-empty runs whose
// largest total is as small as possible. Returns stages + 1 boundaries: stage i holds
// layers [b[i], b[i+1]). REQUIRES: 1 <= stages <= costs.size().
std::vector<std::size_t> balance_stages(std::span<const double> costs, std::size_t stages);

// Cost by parameter count (a parameter-free layer costs 1, so it still counts).
std::vector<double> parameter_costs(const model::Model& model);

// Cost by measured time: forward + backward of each layer on `batch` columns of random
// input, best of a few runs. Differs from run to run: measure on one rank and share.
std::vector<double> measured_costs(const model::Model& model, int batch);

}  // namespace fedcore::distributed
