#include "shared/model/loss.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "tests/model/gradient_check.hpp"

namespace fedcore::model {
namespace {

TEST(SoftmaxCrossEntropy, MatchesHandComputedValue) {
  Matrix logits(3, 1);
  logits << 1, 2, 3;
  const std::vector<std::int32_t> labels{2};
  Matrix grad;
  const auto value = evaluate_loss(LossKind::softmax_cross_entropy, logits, labels, &grad);
  const double log_sum = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(value.loss, log_sum - 3.0, 1e-6);
  EXPECT_EQ(value.correct, 1u);
  EXPECT_NEAR(grad(0, 0), std::exp(1.0 - log_sum), 1e-6);
  EXPECT_NEAR(grad(2, 0), std::exp(3.0 - log_sum) - 1.0, 1e-6);
}

TEST(SoftmaxCrossEntropy, StaysFiniteForHugeLogits) {
  Matrix logits(2, 1);
  logits << 1000, -1000;
  const std::vector<std::int32_t> labels{1};
  Matrix grad;
  const auto value = evaluate_loss(LossKind::softmax_cross_entropy, logits, labels, &grad);
  EXPECT_NEAR(value.loss, 2000.0, 1e-3);
  EXPECT_TRUE(grad.allFinite());
}

TEST(BinaryCrossEntropy, MatchesHandComputedValues) {
  Matrix logits(1, 2);
  logits << 0, 2;
  const std::vector<std::int32_t> labels{1, 0};
  Matrix grad;
  const auto value = evaluate_loss(LossKind::binary_cross_entropy, logits, labels, &grad);
  const double expected = (std::log(2.0) + 2.0 + std::log1p(std::exp(-2.0))) / 2.0;
  EXPECT_NEAR(value.loss, expected, 1e-6);
  EXPECT_EQ(value.correct,
            0u);  // 0 is not > 0, so predicted 0 for label 1; 2 > 0 predicts 1 for label 0
  EXPECT_NEAR(grad(0, 0), (0.5 - 1.0) / 2.0, 1e-6);
  EXPECT_NEAR(grad(0, 1), (1.0 / (1.0 + std::exp(-2.0))) / 2.0, 1e-6);
}

TEST(BinaryCrossEntropy, StaysFiniteForHugeLogits) {
  Matrix logits(1, 2);
  logits << 500, -500;
  const std::vector<std::int32_t> labels{0, 1};
  Matrix grad;
  const auto value = evaluate_loss(LossKind::binary_cross_entropy, logits, labels, &grad);
  EXPECT_NEAR(value.loss, 500.0, 1e-3);
  EXPECT_TRUE(grad.allFinite());
}

// Central differences of the mean loss against the analytic gradient, for both losses.
void expect_loss_gradient_matches(LossKind kind, Eigen::Index rows,
                                  std::vector<std::int32_t> labels) {
  Rng rng(9);
  Matrix logits = testing::random_matrix(rows, static_cast<Eigen::Index>(labels.size()), rng, 2.0f);
  Matrix grad;
  evaluate_loss(kind, logits, labels, &grad);
  std::vector<double> analytic, numeric;
  for (Eigen::Index i = 0; i < logits.size(); ++i) {
    const float saved = logits.data()[i];
    logits.data()[i] = saved + testing::kStep;
    const double plus = evaluate_loss(kind, logits, labels, nullptr).loss;
    logits.data()[i] = saved - testing::kStep;
    const double minus = evaluate_loss(kind, logits, labels, nullptr).loss;
    logits.data()[i] = saved;
    numeric.push_back((plus - minus) / (2.0 * testing::kStep));
    analytic.push_back(grad.data()[i]);
  }
  EXPECT_LE(testing::relative_error(analytic, numeric), testing::kGradientTolerance)
      << loss_name(kind);
}

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  expect_loss_gradient_matches(LossKind::softmax_cross_entropy, 5, {0, 4, 2, 2});
}

TEST(BinaryCrossEntropy, GradientMatchesFiniteDifferences) {
  expect_loss_gradient_matches(LossKind::binary_cross_entropy, 1, {0, 1, 1, 0, 1});
}

TEST(PredictClass, UsesArgmaxOrSign) {
  Matrix multi(3, 1);
  multi << 0.1f, 0.7f, 0.2f;
  EXPECT_EQ(predict_class(LossKind::softmax_cross_entropy, multi, 0), 1);
  Matrix binary(1, 2);
  binary << -0.3f, 0.4f;
  EXPECT_EQ(predict_class(LossKind::binary_cross_entropy, binary, 0), 0);
  EXPECT_EQ(predict_class(LossKind::binary_cross_entropy, binary, 1), 1);
}

}  // namespace
}  // namespace fedcore::model
