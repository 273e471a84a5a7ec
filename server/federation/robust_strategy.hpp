// Robust strategies: the aggregators of robust_aggregation.hpp behind the Strategy seam
// (aggregate.hpp), for the run config's "median", "trimmed_mean", "krum", "multi_krum",
// "bulyan" and "centered_clipping" (StrategyConfig, strategy_config.hpp).
//
// These rules need the whole round at once, so each update is copied into an UpdateBuffer
// as it arrives (add_update) and the rule runs in finish_round: memory within
// StrategyConfig::memory_budget_bytes for the updates, the rest in an unlinked scratch file
// in StrategyConfig::scratch_dir (update_buffer.hpp). The exception is centered_clipping
// with clipping_iterations = 1, which folds each update into a sum as it arrives
// (ClippedStepSum: O(model) memory, no buffer); with more iterations it buffers too.
//
// Sample counts are ignored (robust_aggregation.hpp says why): add_update's `samples` and
// begin_round's weight bound play no part.
//
// A rule that cannot work with the number of updates a round has, e.g. Krum with
// n <= 2f + 2, is refused twice: up front for the run's clients_per_round
// (check_robust_config) and for the updates a round actually received (refuse_finish), so
// a round left with too few by dropouts fails with the rule in words instead of
// aggregating. A buffer that could not take an update (the scratch file refused, the disk
// full) makes refuse_finish report that error too: no update is lost silently.
//
// Thread safety: none, like every Strategy; one round's coroutine uses it.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/federation/aggregate.hpp"
#include "server/federation/strategy_config.hpp"
#include "shared/util/error.hpp"

namespace fedcore::federation {

// True for the six names above.
bool is_robust_strategy(std::string_view name) noexcept;

// A strategy for config.name over models of `param_count` parameters. Allocates nothing
// large and touches no file until updates arrive.
// Errors: invalid_argument for a name that is not a robust strategy, and for options it
// cannot use, naming the option and its value: trim_fraction outside [0, 0.5) (trimmed_mean),
// clipping_radius not a finite number above 0 or clipping_iterations outside 1 to 100
// (centered_clipping), krum_selected > 0 with krum (which selects exactly one update; that
// is multi_krum), byzantine or krum_selected above 2^32.
result<std::unique_ptr<Strategy>> make_robust_strategy(const StrategyConfig& config,
                                                       std::size_t param_count);

// Why a run whose rounds aggregate `clients_per_round` updates cannot use config's robust
// strategy, in words with the rule and the numbers; nothing when it can, or when config.name
// is not a robust strategy. The rules (n = clients_per_round, f = byzantine,
// m = krum_selected, beta = trim_fraction):
//   krum, multi_krum   n > 2f + 2
//   multi_krum         n >= m + f (m <= n - f), when m > 0
//   bulyan             n >= 4f + 3
//   trimmed_mean       n - 2 floor(beta n) >= 1
//   every one          n >= 1
// e.g. "krum with byzantine = 3 needs more than 2f + 2 = 8 updates per round;
// clients_per_round is 7". Options make_robust_strategy would refuse are reported first,
// in its words.
std::optional<std::string> check_robust_config(const StrategyConfig& config,
                                               std::size_t clients_per_round);

}  // namespace fedcore::federation
