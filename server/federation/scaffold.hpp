// SCAFFOLD (Karimireddy et al. 2020, "SCAFFOLD: Stochastic Controlled Averaging for
// Federated Learning", Algorithm 1), the server's side.
//
// The server keeps a control variate c, one value per parameter, and sends it with every
// TRAIN (the payload is the global model x followed by c; docs/protocol.md, "SCAFFOLD").
// Each site i keeps its own c_i across rounds (client/control_variates.hpp), trains with
// every gradient corrected by (c - c_i), and answers with its trained parameters y_i
// followed by the change of its control variate, dc_i = (x - y_i) / (K * lr) - c (option II
// of the paper: K local steps at learning rate lr). At the round's close:
//
//   x <- x + server_lr * (mean_S(y_i) - x)      mean: sample-weighted, exactly FedAvg's
//   c <- c + (1 / N) * sum_S(dc_i)              N: the sites eligible for the round
//
// so that c stays the mean of all N sites' c_i when a round samples |S| of them. The paper
// averages the y_i uniformly; the weighted mean keeps server_lr = 1 with c = 0 exactly
// FedAvg. c is the strategy's ServerState ("c"), checkpointed with each round and restored
// on resume (run_model.hpp).
//
// Memory: FedAvg's exact accumulator, c, and a double sum of the round's dc_i.
#pragma once

#include <cstddef>
#include <memory>

#include "server/federation/aggregate.hpp"
#include "server/federation/strategy_config.hpp"
#include "shared/util/error.hpp"

namespace fedcore::federation {

// Errors: invalid_argument when server_lr is outside (0, 100].
result<std::unique_ptr<Strategy>> make_scaffold(const StrategyConfig& config,
                                                std::size_t param_count);

}  // namespace fedcore::federation
