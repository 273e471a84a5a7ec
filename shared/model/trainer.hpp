// Local training and evaluation of a Model on a Dataset: the loop that a centralized run,
// a federated client and a data-parallel worker all share.
//
// Each epoch visits every sample once in an order shuffled by an Rng seeded from
// (seed, epoch), in batches of `batch_size` (the last batch may be smaller). A step is
// forward, loss, backward, optional proximal term and SCAFFOLD correction, optimizer step. Given
// the same model state, data, config and compute-thread count of 1, the result is bit-for-bit the
// same.
//
// Thread safety: none; the model, optimizer and scratch belong to the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "shared/data/dataset.hpp"
#include "shared/data/image_transforms.hpp"
#include "shared/model/eval_report.hpp"
#include "shared/model/loss.hpp"
#include "shared/model/model.hpp"
#include "shared/model/optimizer.hpp"

namespace fedcore::model {

struct TrainConfig {
  int epochs = 1;
  int batch_size = 32;
  std::uint64_t seed = 0;
  // FedProx: pull toward `anchor` with strength mu (no-op when mu is 0 or anchor empty).
  float proximal_mu = 0.0f;
  // SCAFFOLD (Karimireddy et al. 2020): added to every step's gradient, c - c_i (the
  // server's control variate minus the site's); empty: none. REQUIRES: empty or one value
  // per parameter, alive for the call.
  std::span<const float> gradient_correction{};
  // Random crop and flip of every training batch (images only), drawn from the epoch's
  // stream after its shuffle: reproducible like the rest.
  data::Augmentation augmentation{};
  // Stop after this many steps in total (0 = no limit); for smoke tests and benchmarks.
  std::size_t max_steps = 0;
};

struct TrainProgress {
  int epoch = 0;            // 0-based
  std::size_t step = 0;     // steps so far, all epochs
  std::size_t samples = 0;  // samples so far in this epoch
  std::size_t epoch_samples = 0;
  double mean_loss = 0;  // running mean over this epoch
};

struct TrainReport {
  double loss = 0;          // mean training loss of the last epoch (data term only)
  double accuracy = 0;      // training accuracy of the last epoch, measured during training
  std::size_t samples = 0;  // samples processed in total
  std::size_t steps = 0;
  double seconds = 0;
};

// Called after every step; cheap callbacks only.
using ProgressFn = std::function<void(const TrainProgress&)>;

// REQUIRES: data non-empty, data.sample_size() == model.input_size(), batch_size > 0,
// anchor empty or of model.param_count() floats.
TrainReport train(Model& model, LossKind loss, Optimizer& optimizer, const data::Dataset& data,
                  const TrainConfig& config, std::span<const float> anchor = {},
                  const ProgressFn& progress = {});

// Loss and accuracy over the whole data set, in evaluation phase (no dropout).
// `batch_size` bounds memory, not the result: a model keeps activation and im2col buffers
// sized for its largest batch, about 0.6 MB per sample for the McMahan cnn, so 500 made
// every evaluating model hold ~300 MB (7 GB for a 10-site simulation); 64 holds ~40 MB
// for about 5% more time (measured: 10,000 test images, 626 -> 241 MB peak RSS).
EvalReport evaluate(Model& model, LossKind loss, const data::Dataset& data, int batch_size = 64);

}  // namespace fedcore::model
