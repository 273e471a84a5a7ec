#include "shared/model/trainer.hpp"

#include <chrono>
#include <numeric>
#include <vector>

#include "shared/model/proximal.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {
namespace {

void gather(const data::Dataset& data, std::span<const std::size_t> indices, Matrix& batch,
            std::vector<std::int32_t>& labels) {
  batch.resize(data.features.rows(), static_cast<Eigen::Index>(indices.size()));
  labels.resize(indices.size());
  for (std::size_t j = 0; j < indices.size(); ++j) {
    batch.col(static_cast<Eigen::Index>(j)) =
        data.features.col(static_cast<Eigen::Index>(indices[j]));
    labels[j] = data.labels[indices[j]];
  }
}

}  // namespace

TrainReport train(Model& model, LossKind loss, Optimizer& optimizer, const data::Dataset& data,
                  const TrainConfig& config, std::span<const float> anchor,
                  const ProgressFn& progress) {
  FEDCORE_ASSERT(data.size() > 0, "train: empty data set");
  FEDCORE_ASSERT(data.sample_size() == model.input_size(),
                 "train: sample size differs from the model input");
  FEDCORE_ASSERT(config.batch_size > 0 && config.epochs >= 0, "train: bad config");
  FEDCORE_ASSERT(anchor.empty() || anchor.size() == model.param_count(),
                 "train: anchor size differs");
  FEDCORE_ASSERT(!config.augmentation.enabled() || data.sample_shape.size() == 3,
                 "train: augmentation needs images");
  FEDCORE_ASSERT(config.gradient_correction.empty() ||
                     config.gradient_correction.size() == model.param_count(),
                 "train: gradient correction size differs");
  const auto start = std::chrono::steady_clock::now();
  const bool proximal = config.proximal_mu > 0 && !anchor.empty();

  std::vector<std::size_t> order(data.size());
  Matrix batch;
  Matrix grad_logits;
  std::vector<std::int32_t> labels;
  TrainReport report;
  for (int epoch = 0; epoch < config.epochs; ++epoch) {
    std::iota(order.begin(), order.end(), std::size_t{0});
    Rng rng(config.seed * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(epoch));
    rng.shuffle(std::span<std::size_t>(order));
    double loss_sum = 0;
    std::size_t correct = 0;
    std::size_t seen = 0;
    for (std::size_t begin = 0; begin < order.size();
         begin += static_cast<std::size_t>(config.batch_size)) {
      if (config.max_steps > 0 && report.steps >= config.max_steps) {
        break;
      }
      const std::size_t count =
          std::min(order.size() - begin, static_cast<std::size_t>(config.batch_size));
      gather(data, std::span(order).subspan(begin, count), batch, labels);
      if (config.augmentation.enabled()) {
        data::augment_images(batch, data.sample_shape, config.augmentation, rng);
      }
      const Matrix& logits = model.forward(batch, Phase::train);
      const LossValue value = evaluate_loss(loss, logits, labels, &grad_logits);
      model.backward(grad_logits);
      if (proximal) {
        add_proximal_term(model.params(), anchor, model.grads(), config.proximal_mu);
      }
      if (!config.gradient_correction.empty()) {
        const auto grads = model.grads();
        for (std::size_t i = 0; i < grads.size(); ++i) {
          grads[i] += config.gradient_correction[i];
        }
      }
      optimizer.step(model.params(), model.grads());
      loss_sum += value.loss * double(count);
      correct += value.correct;
      seen += count;
      ++report.steps;
      if (progress) {
        progress({epoch, report.steps, seen, order.size(), loss_sum / double(seen)});
      }
    }
    report.samples += seen;
    report.loss = seen ? loss_sum / double(seen) : 0;
    report.accuracy = seen ? double(correct) / double(seen) : 0;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

EvalReport evaluate(Model& model, LossKind loss, const data::Dataset& data, int batch_size) {
  FEDCORE_ASSERT(data.sample_size() == model.input_size(),
                 "evaluate: sample size differs from the model input");
  FEDCORE_ASSERT(batch_size > 0, "evaluate: batch_size must be positive");
  EvalReport report;
  double loss_sum = 0;
  std::size_t correct = 0;
  Matrix batch;
  std::vector<std::int32_t> labels;
  std::vector<std::size_t> indices;
  for (std::size_t begin = 0; begin < data.size(); begin += static_cast<std::size_t>(batch_size)) {
    const std::size_t count = std::min(data.size() - begin, static_cast<std::size_t>(batch_size));
    indices.resize(count);
    std::iota(indices.begin(), indices.end(), begin);
    gather(data, indices, batch, labels);
    const LossValue value = evaluate_loss(loss, model.forward(batch, Phase::eval), labels, nullptr);
    loss_sum += value.loss * double(count);
    correct += value.correct;
  }
  report.samples = data.size();
  report.loss = data.size() ? loss_sum / double(data.size()) : 0;
  report.accuracy = data.size() ? double(correct) / double(data.size()) : 0;
  return report;
}

}  // namespace fedcore::model
