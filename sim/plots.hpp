// The run's SVG plots, written into the output folder:
//   accuracy.svg            test accuracy per round (and the baseline per epoch)
//   accuracy_vs_epsilon.svg DP runs: test accuracy against the privacy budget spent
//   loss.svg                test loss per round (and the baseline per epoch)
//   federated_vs_centralized.svg  accuracy against passes over the training data
//   label_distribution.svg  samples of each class held by each client (stacked bars;
//                           the first 100 clients when there are more)
#pragma once

#include <string>
#include <vector>

#include "shared/util/error.hpp"
#include "sim/baseline.hpp"
#include "sim/federation_run.hpp"
#include "sim/options.hpp"
#include "sim/sim_data.hpp"

namespace fedcore::sim {

// Writes the plots that the available results allow; returns the file names written.
// Errors: io_error naming the file.
result<std::vector<std::string>> write_plots(const std::string& out_dir, const SimOptions& options,
                                             const SimData* data, const FederatedResult* federated,
                                             const BaselineResult* baseline);

}  // namespace fedcore::sim
