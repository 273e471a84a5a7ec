#include "shared/model/loss.hpp"

#include <cmath>

#include "shared/util/assert.hpp"

namespace fedcore::model {
namespace {

LossValue softmax_cross_entropy(const Matrix& logits, std::span<const std::int32_t> labels,
                                Matrix* grad) {
  const auto classes = logits.rows();
  const auto batch = logits.cols();
  if (grad != nullptr) {
    grad->resize(classes, batch);
  }
  LossValue value;
  double total = 0;
  const float inv_batch = 1.0f / static_cast<float>(batch);
  for (Eigen::Index j = 0; j < batch; ++j) {
    const auto label = labels[static_cast<std::size_t>(j)];
    FEDCORE_ASSERT(label >= 0 && label < classes, "label out of range for softmax cross-entropy");
    Eigen::Index argmax;
    const float top = logits.col(j).maxCoeff(&argmax);
    double sum = 0;
    for (Eigen::Index i = 0; i < classes; ++i) {
      sum += std::exp(double(logits(i, j) - top));
    }
    const double log_sum = std::log(sum) + top;
    total += log_sum - logits(label, j);
    value.correct += argmax == label ? 1 : 0;
    if (grad != nullptr) {
      for (Eigen::Index i = 0; i < classes; ++i) {
        const double p = std::exp(double(logits(i, j)) - log_sum);
        (*grad)(i, j) = static_cast<float>(p - (i == label ? 1.0 : 0.0)) * inv_batch;
      }
    }
  }
  value.loss = total / double(batch);
  return value;
}

LossValue binary_cross_entropy(const Matrix& logits, std::span<const std::int32_t> labels,
                               Matrix* grad) {
  FEDCORE_ASSERT(logits.rows() == 1, "binary cross-entropy needs one logit per sample");
  const auto batch = logits.cols();
  if (grad != nullptr) {
    grad->resize(1, batch);
  }
  LossValue value;
  double total = 0;
  for (Eigen::Index j = 0; j < batch; ++j) {
    const auto label = labels[static_cast<std::size_t>(j)];
    FEDCORE_ASSERT(label == 0 || label == 1, "binary cross-entropy needs labels 0 or 1");
    const double z = logits(0, j);
    // max(z, 0) - z*y + log(1 + exp(-|z|)) equals -[y log s(z) + (1-y) log(1 - s(z))].
    total += std::max(z, 0.0) - z * label + std::log1p(std::exp(-std::abs(z)));
    value.correct += (z > 0 ? 1 : 0) == label ? 1 : 0;
    if (grad != nullptr) {
      const double sigmoid = 1.0 / (1.0 + std::exp(-z));
      (*grad)(0, j) = static_cast<float>((sigmoid - label) / double(batch));
    }
  }
  value.loss = total / double(batch);
  return value;
}

}  // namespace

std::string_view loss_name(LossKind kind) noexcept {
  return kind == LossKind::softmax_cross_entropy ? "softmax_cross_entropy" : "binary_cross_entropy";
}

LossValue evaluate_loss(LossKind kind, const Matrix& logits, std::span<const std::int32_t> labels,
                        Matrix* grad_logits) {
  FEDCORE_ASSERT(labels.size() == static_cast<std::size_t>(logits.cols()),
                 "one label per logits column");
  if (logits.cols() == 0) {
    return {};
  }
  return kind == LossKind::softmax_cross_entropy
             ? softmax_cross_entropy(logits, labels, grad_logits)
             : binary_cross_entropy(logits, labels, grad_logits);
}

std::int32_t predict_class(LossKind kind, const Matrix& logits, Eigen::Index j) {
  if (kind == LossKind::binary_cross_entropy) {
    return logits(0, j) > 0 ? 1 : 0;
  }
  Eigen::Index argmax;
  logits.col(j).maxCoeff(&argmax);
  return static_cast<std::int32_t>(argmax);
}

}  // namespace fedcore::model
