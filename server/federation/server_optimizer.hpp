// Server optimizers: FedAvgM, FedAdagrad, FedAdam and FedYogi (Reddi et al. 2021,
// "Adaptive Federated Optimization", Algorithm 2; FedAvgM: Hsu et al. 2019).
//
// Each round the sites' sample-weighted mean is computed exactly as FedAvg does
// (fixed_point_mean.hpp); its difference from the round's global model x is the round's
// pseudo-gradient delta, and the strategy moves x by an optimizer step on it:
//
//   fedavgm     m = server_momentum * m + delta                  x += server_lr * m
//   fedadagrad  m = beta1 * m + (1 - beta1) * delta
//               v = v + delta^2                                   x += server_lr * m / (sqrt(v) +
//               tau)
//   fedadam     m as fedadagrad; v = beta2 * v + (1 - beta2) * delta^2   (the same step)
//   fedyogi     m as fedadagrad; v = v - (1 - beta2) * delta^2 * sign(v - delta^2)
//
// As in the paper, v starts at tau^2 (v_{-1} >= tau^2), m at 0, and there is no bias
// correction. fedavgm with server_lr 1 and server_momentum 0 is FedAvg.
//
// The moments are the strategy's ServerState: a new immutable snapshot after every round,
// which the checkpoint writer saves beside the round's checkpoint (run_model.hpp), so a
// restarted server continues with the moments of the last committed round.
// Memory: the mean's accumulator plus one (fedavgm) or two (the adaptive ones) float
// vectors of the model's size, and during finish_round a second copy of them.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "server/federation/aggregate.hpp"
#include "server/federation/strategy_config.hpp"
#include "shared/util/error.hpp"

namespace fedcore::federation {

enum class ServerOptimizerKind { momentum, adagrad, adam, yogi };

// The kind "fedavgm", "fedadagrad", "fedadam" or "fedyogi" names; nothing for other names.
std::optional<ServerOptimizerKind> server_optimizer_kind(std::string_view name) noexcept;

// Errors: invalid_argument when a hyper-parameter is out of its range (server_lr in
// (0, 100], server_momentum and beta1 in [0, 1), beta2 in [0, 1), tau in (0, 1]), naming it.
result<std::unique_ptr<Strategy>> make_server_optimizer(ServerOptimizerKind kind,
                                                        const StrategyConfig& config,
                                                        std::size_t param_count);

}  // namespace fedcore::federation
