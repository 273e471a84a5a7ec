// Losses on logits, averaged over the batch (one column per sample).
//
//  - softmax cross-entropy: logits are num_classes x batch, labels in [0, num_classes).
//  - binary cross-entropy with logits: logits are 1 x batch, labels 0 or 1.
//
// Both are computed in a numerically stable form (log-sum-exp; softplus), so large
// logits do not overflow. Gradients are with respect to the logits and already include
// the 1/batch of the mean.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "shared/model/layer.hpp"
#include "shared/model/loss_kind.hpp"

namespace fedcore::model {

struct LossValue {
  double loss = 0;          // mean over the batch
  std::size_t correct = 0;  // samples whose predicted class equals the label
};

// Mean loss and, when `grad_logits` is non-null, its gradient (resized to logits' shape).
// REQUIRES: labels.size() == logits.cols(), labels in range for the kind.
LossValue evaluate_loss(LossKind kind, const Matrix& logits, std::span<const std::int32_t> labels,
                        Matrix* grad_logits);

// Predicted class of column `j`.
std::int32_t predict_class(LossKind kind, const Matrix& logits, Eigen::Index j);

}  // namespace fedcore::model
