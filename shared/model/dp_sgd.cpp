#include "shared/model/dp_sgd.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "shared/model/proximal.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {
namespace {

// The batched path needs every parameter gradient to be an outer product dy_i x_i^T per
// example (dense) and every other layer to act on each column alone without randomness
// of its own. Dropout is per-column too, but its mask stream lives in the model's layer,
// which the clones below would not advance; so it takes the per-record path.
bool batchable(const Model& model) {
  for (std::size_t i = 0; i < model.layer_count(); ++i) {
    const auto kind = model.layer(i).kind();
    if (kind != "dense" && kind != "relu" && kind != "flatten") {
      return false;
    }
  }
  return true;
}

// The model's layers cloned and bound to the model's own parameter and gradient buffers,
// so that this code can keep every layer's input and output gradient (the Model keeps
// them private). The optimizer updates model.params() in place, which the clones see.
class BatchedChain {
 public:
  explicit BatchedChain(Model& model) {
    std::size_t offset = 0;
    for (std::size_t i = 0; i < model.layer_count(); ++i) {
      auto layer = model.layer(i).clone();
      std::size_t size = 0;
      for (const auto& p : layer->param_shapes()) {
        size += element_count(p.shape);
      }
      layer->bind(model.params().subspan(offset, size), model.grads().subspan(offset, size));
      offset += size;
      has_params_.push_back(size > 0);
      layers_.push_back(std::move(layer));
    }
    FEDCORE_ASSERT(offset == model.param_count(), "dp_sgd: layer slices do not tile the model");
    outputs_.resize(layers_.size());
    output_grads_.resize(layers_.size());
  }

  // Keeps a pointer to `input`, whose columns clipped_sum() may zero.
  const Matrix& forward(Matrix& input) {
    input_ = &input;
    const Matrix* x = &input;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      layers_[i]->forward(*x, outputs_[i], Phase::train);
      x = &outputs_[i];
    }
    return *x;
  }

  // Keeps d loss_i / d output for every layer, one column per example.
  void backward(const Matrix& grad_logits) {
    output_grads_.back() = grad_logits;
    for (std::size_t i = layers_.size() - 1; i > 0; --i) {
      layers_[i]->backward(layer_input(i), outputs_[i], output_grads_[i], output_grads_[i - 1]);
    }
  }

  // ||g_i||^2 over all parameters: sum over dense layers of ||dy_i||^2 (||x_i||^2 + 1).
  void squared_norms(Eigen::VectorXd& out) const {
    out.setZero(input_->cols());
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      if (!has_params_[i]) {
        continue;
      }
      const Eigen::RowVectorXd dy = output_grads_[i].colwise().squaredNorm().cast<double>();
      const Eigen::RowVectorXd x = layer_input(i).colwise().squaredNorm().cast<double>();
      out += (dy.array() * (x.array() + 1.0)).matrix().transpose();
    }
  }

  // Writes sum_i factor_i g_i into the gradient buffer: each layer's gradient is linear in
  // the columns of its output gradient. A zero factor zeroes the record's columns in every
  // layer's input and output gradient, so a record with a non-finite gradient contributes
  // nothing (0 * inf would be NaN inside the GEMM).
  void clipped_sum(const Eigen::VectorXf& factors) {
    for (Eigen::Index j = 0; j < factors.size(); ++j) {
      if (factors[j] == 0.0f) {
        input_->col(j).setZero();
        for (auto& output : outputs_) {
          output.col(j).setZero();
        }
      }
    }
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      if (!has_params_[i]) {
        continue;
      }
      scaled_.resize(output_grads_[i].rows(), output_grads_[i].cols());
      for (Eigen::Index j = 0; j < scaled_.cols(); ++j) {
        if (factors[j] == 0.0f) {
          scaled_.col(j).setZero();
        } else {
          scaled_.col(j) = output_grads_[i].col(j) * factors[j];
        }
      }
      layers_[i]->gradient(layer_input(i), scaled_);
    }
  }

 private:
  const Matrix& layer_input(std::size_t i) const { return i == 0 ? *input_ : outputs_[i - 1]; }

  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<bool> has_params_;
  std::vector<Matrix> outputs_;
  std::vector<Matrix> output_grads_;
  Matrix scaled_;
  Matrix* input_ = nullptr;
};

// min(1, C / norm), and 0 for a non-finite norm (the record is dropped, which keeps the
// sensitivity at C whatever the record does to the loss).
float clip_factor(double norm, double clip) {
  if (!std::isfinite(norm)) {
    return 0.0f;
  }
  return norm > clip ? static_cast<float>(clip / norm) : 1.0f;
}

struct StepStats {
  double loss_sum = 0;
  std::size_t correct = 0;
  std::size_t clipped = 0;
};

// Batched path: writes the clipped sum into model.grads().
void clipped_sum_batched(BatchedChain& chain, Model& model, LossKind loss, Matrix& batch,
                         std::span<const std::int32_t> labels, double clip, Matrix& grad_logits,
                         Eigen::VectorXd& norms, Eigen::VectorXf& factors, StepStats& stats) {
  const auto count = batch.cols();
  if (count == 0) {
    std::fill(model.grads().begin(), model.grads().end(), 0.0f);
    return;
  }
  const LossValue value = evaluate_loss(loss, chain.forward(batch), labels, &grad_logits);
  // evaluate_loss includes the batch mean's 1/count; each column becomes its record's own
  // loss gradient.
  grad_logits *= static_cast<float>(count);
  chain.backward(grad_logits);
  chain.squared_norms(norms);
  factors.resize(count);
  for (Eigen::Index j = 0; j < count; ++j) {
    const double norm = std::sqrt(norms[j]);
    factors[j] = clip_factor(norm, clip);
    stats.clipped += !(norm <= clip);
  }
  chain.clipped_sum(factors);
  stats.loss_sum += value.loss * double(count);
  stats.correct += value.correct;
}

// Per-record path: one forward and backward per record, through the model itself.
void clipped_sum_per_record(Model& model, LossKind loss, const Matrix& batch,
                            std::span<const std::int32_t> labels, double clip, Matrix& one,
                            Matrix& grad_logits, std::vector<float>& sum, StepStats& stats) {
  std::fill(sum.begin(), sum.end(), 0.0f);
  Eigen::Map<Eigen::VectorXf> total(sum.data(), static_cast<Eigen::Index>(sum.size()));
  Eigen::Map<const Eigen::VectorXf> grads(model.grads().data(),
                                          static_cast<Eigen::Index>(model.param_count()));
  for (Eigen::Index j = 0; j < batch.cols(); ++j) {
    one = batch.col(j);
    const LossValue value =
        evaluate_loss(loss, model.forward(one, Phase::train),
                      labels.subspan(static_cast<std::size_t>(j), 1), &grad_logits);
    model.backward(grad_logits);
    const double norm = grads.cast<double>().norm();
    const float factor = clip_factor(norm, clip);
    stats.clipped += !(norm <= clip);
    if (factor != 0.0f) {
      total += grads * factor;
    }
    stats.loss_sum += value.loss;
    stats.correct += value.correct;
  }
  std::copy(sum.begin(), sum.end(), model.grads().begin());
}

}  // namespace

std::size_t dp_sgd_steps_per_epoch(std::size_t records, int expected_batch) {
  FEDCORE_ASSERT(records > 0 && expected_batch > 0, "dp_sgd_steps_per_epoch: bad sizes");
  const auto steps = std::llround(double(records) / double(expected_batch));
  return static_cast<std::size_t>(std::max<long long>(1, steps));
}

result<DpSgdReport> train_dp_sgd(Model& model, LossKind loss, Optimizer& optimizer,
                                 const data::Dataset& data, const DpSgdConfig& config,
                                 const DpRandom& random, std::span<const float> anchor,
                                 const DpSgdProgressFn& progress) {
  FEDCORE_ASSERT(data.size() > 0, "train_dp_sgd: empty data set");
  FEDCORE_ASSERT(data.sample_size() == model.input_size(),
                 "train_dp_sgd: sample size differs from the model input");
  FEDCORE_ASSERT(config.expected_batch > 0 && config.epochs >= 0, "train_dp_sgd: bad config");
  FEDCORE_ASSERT(config.clip_norm > 0 && std::isfinite(config.clip_norm),
                 "train_dp_sgd: clip_norm must be positive");
  FEDCORE_ASSERT(config.noise_multiplier >= 0 && std::isfinite(config.noise_multiplier),
                 "train_dp_sgd: noise_multiplier must be non-negative");
  FEDCORE_ASSERT(random.normal && random.uniform, "train_dp_sgd: random sources not set");
  FEDCORE_ASSERT(anchor.empty() || anchor.size() == model.param_count(),
                 "train_dp_sgd: anchor size differs");
  const auto start = std::chrono::steady_clock::now();
  const std::size_t n = data.size();
  const double q = std::min(1.0, double(config.expected_batch) / double(n));
  // Divide by the expected batch size, which does not depend on which records were drawn.
  const auto expected = static_cast<float>(q * double(n));
  const double noise_std = config.noise_multiplier * config.clip_norm;
  const std::size_t steps_per_epoch = dp_sgd_steps_per_epoch(n, config.expected_batch);
  const bool proximal = config.proximal_mu > 0 && !anchor.empty();

  DpSgdReport report;
  report.sampling_rate = q;
  report.noise_multiplier = config.noise_multiplier;
  report.clip_norm = config.clip_norm;
  report.batched = config.batched_per_example && batchable(model);
  std::unique_ptr<BatchedChain> chain;
  if (report.batched) {
    chain = std::make_unique<BatchedChain>(model);
  }

  std::vector<double> uniforms(n);
  std::vector<double> normals(noise_std > 0 ? model.param_count() : 0);
  std::vector<std::size_t> drawn;
  std::vector<std::int32_t> labels;
  std::vector<float> sum(report.batched ? 0 : model.param_count());
  Matrix batch;
  Matrix one;
  Matrix grad_logits;
  Eigen::VectorXd norms;
  Eigen::VectorXf factors;
  const auto grads = model.grads();
  for (int epoch = 0; epoch < config.epochs; ++epoch) {
    StepStats stats;
    std::size_t seen = 0;
    for (std::size_t s = 0; s < steps_per_epoch; ++s) {
      if (config.max_steps > 0 && report.steps >= config.max_steps) {
        break;
      }
      // Poisson sampling: one independent draw per record (q == 1 takes everyone).
      if (auto filled = random.uniform(uniforms); !filled) {
        return filled.error();
      }
      drawn.clear();
      for (std::size_t i = 0; i < n; ++i) {
        if (uniforms[i] < q) {
          drawn.push_back(i);
        }
      }
      batch.resize(data.features.rows(), static_cast<Eigen::Index>(drawn.size()));
      labels.resize(drawn.size());
      for (std::size_t j = 0; j < drawn.size(); ++j) {
        batch.col(static_cast<Eigen::Index>(j)) =
            data.features.col(static_cast<Eigen::Index>(drawn[j]));
        labels[j] = data.labels[drawn[j]];
      }

      if (report.batched) {
        clipped_sum_batched(*chain, model, loss, batch, labels, config.clip_norm, grad_logits,
                            norms, factors, stats);
      } else {
        clipped_sum_per_record(model, loss, batch, labels, config.clip_norm, one, grad_logits, sum,
                               stats);
      }
      // Noise drawn in double, added in float; then the expected-batch mean.
      if (noise_std > 0) {
        if (auto filled = random.normal(normals); !filled) {
          return filled.error();
        }
        for (std::size_t i = 0; i < grads.size(); ++i) {
          grads[i] = (grads[i] + static_cast<float>(noise_std * normals[i])) / expected;
        }
      } else {
        for (float& g : grads) {
          g /= expected;
        }
      }
      if (proximal) {
        add_proximal_term(model.params(), anchor, grads, config.proximal_mu);
      }
      optimizer.step(model.params(), grads);

      seen += drawn.size();
      ++report.steps;
      if (progress) {
        progress({epoch, report.steps, drawn.size(), seen ? stats.loss_sum / double(seen) : 0});
      }
    }
    report.samples += seen;
    report.clipped += stats.clipped;
    report.loss = seen ? stats.loss_sum / double(seen) : 0;
    report.accuracy = seen ? double(stats.correct) / double(seen) : 0;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace fedcore::model
