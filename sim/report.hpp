// The run's report files: rounds.csv, baseline.csv and summary.json.
//
// rounds.csv columns: round, accuracy, loss, participants, rejected, dropped, timed_out,
// bytes_up, bytes_down, duration_s, train_loss, elapsed_s. accuracy and loss are the
// global model's on the test split, printed with 6 decimals so that two reproducible
// runs give byte-identical columns.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/util/error.hpp"
#include "sim/baseline.hpp"
#include "sim/federation_run.hpp"
#include "sim/options.hpp"

namespace fedcore::sim {

// The first round (1-based) whose accuracy reaches `target`, if any.
std::optional<std::int64_t> rounds_to_reach(const std::vector<RoundRow>& rounds, double target);
std::optional<int> epochs_to_reach(const std::vector<EpochRow>& curve, double target);

std::string rounds_csv(const std::vector<RoundRow>& rounds);
std::string baseline_csv(const std::vector<EpochRow>& curve);

// Everything summary.json holds. `wall_s` is the whole invocation; `peak_rss_bytes`
// the process's peak resident set.
nlohmann::json summary_json(const SimOptions& options, const FederatedResult* federated,
                            const BaselineResult* baseline, double wall_s,
                            std::uint64_t peak_rss_bytes);

// Writes `text` to `path` (replacing it). Errors: io_error naming the file.
result<void> write_text(const std::string& path, const std::string& text);

// The process's peak resident set size so far (getrusage).
std::uint64_t peak_rss_bytes() noexcept;

}  // namespace fedcore::sim
