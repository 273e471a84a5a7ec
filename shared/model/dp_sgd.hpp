// DP-SGD (Abadi et al. 2016): local training with record-level differential privacy, so
// that the trained parameters reveal little about any one record (one patient).
//
// One step, with N records, expected batch B, clip norm C and noise multiplier z:
//  1. Poisson sampling: every record joins the step's batch independently with
//     probability q = min(1, B / N), so the batch size itself is random (Binomial(N, q)
//     and may be 0). This is exactly the "Poisson-subsampled Gaussian mechanism" that RDP
//     accountants analyse (Mironov, Talwar and Zhang 2019); shuffling into fixed-size
//     batches would not be, and its epsilon would be wrong.
//  2. Every sampled record's gradient g_i (of its own loss, not the batch mean) is clipped:
//     g_i * min(1, C / ||g_i||_2), over all parameters at once.
//  3. The clipped gradients are summed and Gaussian noise N(0, (z C)^2) is added to every
//     coordinate (normals drawn in double, added in float).
//  4. The sum is divided by the expected batch size q N (not by the sampled count, which
//     would depend on the data), and the optimizer steps with it. A step with no sampled
//     record still steps, with noise only: the accountant counts every step.
// An epoch is max(1, round(N / B)) steps (= round(1 / q)), so an epoch visits every record
// once in expectation; the run is epochs * that many steps (or max_steps if smaller).
//
// Per-example gradients: a model whose layers are all dense, relu or flatten is handled in
// one batched forward and backward: a dense layer's per-example gradient is the outer
// product dy_i x_i^T, whose squared norm is ||dy_i||^2 (||x_i||^2 + 1) with the bias, and
// since every layer's parameter gradient is linear in its per-example output gradients,
// scaling column i of each dy by the clip factor gives the clipped sum in one GEMM per
// layer (Goodfellow 2015, "Efficient per-example gradient computations"). Any other model
// (conv2d, maxpool2d, dropout) runs forward and backward once per sampled record. Both
// paths compute the same update up to float rounding (tests/model/dp_sgd_test.cpp).
//
// What the caller must get right for the guarantee to hold:
//  - `random.normal` and `random.uniform` must be secret from whoever sees the result: in
//    production a CSPRNG (the client passes one built on OpenSSL's RAND_priv_bytes), never
//    a seed that the server chose or can see. A seeded source is for tests only.
//  - q, z and the number of steps (DpSgdReport) are what the accountant needs; the
//    epsilon is the caller's to compute (shared/privacy).
//  - The report's loss and accuracy are measured on the private records without noise:
//    they are for local diagnostics and must not be released.
//
// Thread safety: none; the model, optimizer and random sources belong to the calling thread.
#pragma once

#include <cstddef>
#include <functional>
#include <span>

#include "shared/data/dataset.hpp"
#include "shared/model/loss.hpp"
#include "shared/model/model.hpp"
#include "shared/model/optimizer.hpp"
#include "shared/util/error.hpp"

namespace fedcore::model {

struct DpSgdConfig {
  int epochs = 1;
  int expected_batch = 64;        // B; the sampling rate is q = min(1, B / N)
  double clip_norm = 1.0;         // C, per-example L2 clip over all parameters
  double noise_multiplier = 1.0;  // z; the noise std per coordinate is z * C
  // Stop after this many steps in total (0 = no limit); for tests and benchmarks.
  std::size_t max_steps = 0;
  // FedProx strength toward `anchor` (data-independent, so added after the noise).
  float proximal_mu = 0.0f;
  // Lets a model of only dense/relu/flatten layers use the batched per-example path;
  // false forces one forward/backward per record (tests compare the two).
  bool batched_per_example = true;
};

// Fills its span with independent samples, or fails (then the span must not be used).
using FillFn = std::function<result<void>(std::span<double>)>;

// The randomness of DP-SGD, injected (docs/engineering.md, habit 7). Both must be set.
// The shapes match privacy::NoiseSource::fill_standard_normal, so a site passes
// shared/privacy's CryptoNormal without shared/model depending on shared/privacy.
struct DpRandom {
  FillFn normal;   // N(0, 1): param_count() per step (none when the noise multiplier is 0)
  FillFn uniform;  // uniform in [0, 1): one per record per step, for Poisson sampling
};

struct DpSgdProgress {
  int epoch = 0;            // 0-based
  std::size_t step = 0;     // steps so far, all epochs
  std::size_t sampled = 0;  // records in this step's batch
  double mean_loss = 0;     // running mean over the records sampled in this epoch
};
using DpSgdProgressFn = std::function<void(const DpSgdProgress&)>;

struct DpSgdReport {
  double sampling_rate = 0;     // q
  double noise_multiplier = 0;  // z
  double clip_norm = 0;         // C
  std::size_t steps = 0;        // steps taken, all epochs
  std::size_t samples = 0;      // records sampled, all steps
  std::size_t clipped = 0;      // of those, records whose gradient norm exceeded C
  double loss = 0;              // mean loss of the records sampled in the last epoch
  double accuracy = 0;          // their accuracy (diagnostic only; see above)
  double seconds = 0;
  bool batched = false;  // whether the batched per-example path was used
};

// Trains `model` with DP-SGD as described above.
// Errors: the error of a random source that failed (e.g. unavailable from a CSPRNG); the
// model and optimizer are then partly trained and must be discarded.
// REQUIRES: data non-empty, data.sample_size() == model.input_size(), expected_batch > 0,
// epochs >= 0, clip_norm > 0 and finite, noise_multiplier >= 0 and finite, both random
// sources set, anchor empty or of model.param_count() floats. (A site checks the terms it
// receives before calling; these are assertions.)
result<DpSgdReport> train_dp_sgd(Model& model, LossKind loss, Optimizer& optimizer,
                                 const data::Dataset& data, const DpSgdConfig& config,
                                 const DpRandom& random, std::span<const float> anchor = {},
                                 const DpSgdProgressFn& progress = {});

// max(1, round(N / B)): the steps of one epoch for N records and expected batch B.
// REQUIRES: records > 0, expected_batch > 0.
std::size_t dp_sgd_steps_per_epoch(std::size_t records, int expected_batch);

}  // namespace fedcore::model
