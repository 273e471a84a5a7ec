// The centralized baseline: the same model, optimizer, batch size and seed trained on
// the whole training split on one node, for as many passes over the data as the
// federated run made in total, evaluated on the same test split after every epoch.
#pragma once

#include <functional>
#include <vector>

#include "shared/data/dataset.hpp"
#include "shared/util/error.hpp"
#include "sim/options.hpp"

namespace fedcore::sim {

struct EpochRow {
  int epoch = 0;  // 1-based
  double accuracy = 0;
  double loss = 0;
  double train_loss = 0;
  double seconds = 0;  // wall time of this epoch's training
};

struct BaselineResult {
  int epochs = 0;
  std::vector<EpochRow> curve;
  double wall_s = 0;
  int threads = 0;
};

// options.baseline_epochs when set; otherwise the epochs that match the federated run's
// total work: rounds x local epochs x the fraction of clients sampled per round, rounded
// up, at least 1.
int baseline_epochs(const SimOptions& options);

// Passes over the whole training data one federated round makes (local epochs x the
// fraction of clients sampled), assuming near-equal shares.
double passes_per_round(const SimOptions& options);

// Trains; calls `on_epoch` after each epoch. Errors: the model spec's and optimizer's.
result<BaselineResult> run_baseline(const SimOptions& options, const data::TrainTest& data,
                                    const std::function<void(const EpochRow&)>& on_epoch = {});

}  // namespace fedcore::sim
