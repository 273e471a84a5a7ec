// Scalability reports of fedcore-dist: one JSON per run, and a JSON + SVG that compare
// runs of the same job on different world sizes (speedup and efficiency vs one worker,
// accuracy vs the single-worker run).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "distributed/data_parallel.hpp"

namespace fedcore::distributed {

// The run's report: mode ("ddp", "easgd" or "ps-asgd"), world, transport, steps,
// samples/s, test accuracy, per-rank CPU, RSS, communication share and parameter
// checksum; for the parameter server also "parameter_server": updates, gradients
// received, discarded as stale, unused at stop, mean and max staleness and its histogram.
nlohmann::json run_report(const TrainResult& result, const std::string& transport,
                          const TrainOptions& options);

// The accuracy-per-epoch curve: [{"epoch", "train_seconds", "train_loss", "test_accuracy",
// "test_loss"}, ...] (train_loss -1 where the reporting rank does not compute the loss).
nlohmann::json curve_json(const std::vector<EpochPoint>& curve);

// Compares run reports (any order; the one with world 1 is the baseline, else the
// smallest world). Adds speedup, efficiency and accuracy delta per world.
nlohmann::json scaling_report(const std::vector<nlohmann::json>& runs);
// A self-contained SVG: samples/s and ideal scaling per world, with efficiency and
// communication share as labels.
std::string scaling_svg(const nlohmann::json& scaling);

// Writes text to a file atomically. Errors: io_error.
result<void> write_text(const std::string& path, const std::string& text);

}  // namespace fedcore::distributed
