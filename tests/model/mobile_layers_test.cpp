// MobileNetV2's layers: hand-computed values, PyTorch's BatchNorm semantics, and finite
// differences for every input and parameter gradient.
#include "shared/model/mobile_layers.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "shared/model/inverted_residual.hpp"
#include "shared/model/model.hpp"
#include "shared/util/threads.hpp"
#include "tests/model/gradient_check.hpp"

namespace fedcore::model {
namespace {

using testing::BoundLayer;
using testing::random_matrix;

// ---- BatchNorm2d ---------------------------------------------------------------------

// Two channels, two positions, two samples: channel 0 sees {1, 3, 5, 7}, channel 1 sees
// {2, 2, 2, 6}. Batch mean {4, 3}, biased variance {5, 3}, unbiased {20/3, 4}.
Matrix two_channel_batch() {
  Matrix x(4, 2);  // {1, 2, 2} per sample: HWC = (pos0: c0 c1) (pos1: c0 c1)
  x.col(0) << 1, 2, 3, 2;
  x.col(1) << 5, 2, 7, 6;
  return x;
}

TEST(BatchNorm2d, TrainingNormalisesWithTheBatchAndMovesRunningStatistics) {
  BoundLayer bn(std::make_unique<BatchNorm2d>(Shape{1, 2, 2}));
  bn.params = {2.0f, 1.0f, 0.5f, -1.0f};  // gamma {2, 1}, beta {0.5, -1}
  Matrix y;
  bn.layer->forward(two_channel_batch(), y, Phase::train);
  const float inv0 = 1.0f / std::sqrt(5.0f + BatchNorm2d::kEpsilon);
  const float inv1 = 1.0f / std::sqrt(3.0f + BatchNorm2d::kEpsilon);
  EXPECT_NEAR(y(0, 0), 2.0f * (1 - 4) * inv0 + 0.5f, 1e-5f);
  EXPECT_NEAR(y(1, 0), 1.0f * (2 - 3) * inv1 - 1.0f, 1e-5f);
  EXPECT_NEAR(y(2, 1), 2.0f * (7 - 4) * inv0 + 0.5f, 1e-5f);
  EXPECT_NEAR(y(3, 1), 1.0f * (6 - 3) * inv1 - 1.0f, 1e-5f);
  // PyTorch: running = 0.9 running + 0.1 batch, with the unbiased variance.
  EXPECT_NEAR(bn.state[0], 0.1f * 4.0f, 1e-6f);
  EXPECT_NEAR(bn.state[1], 0.1f * 3.0f, 1e-6f);
  EXPECT_NEAR(bn.state[2], 0.9f + 0.1f * 20.0f / 3.0f, 1e-5f);
  EXPECT_NEAR(bn.state[3], 0.9f + 0.1f * 4.0f, 1e-5f);
}

TEST(BatchNorm2d, EvaluationUsesRunningStatisticsAndLeavesThemAlone) {
  BoundLayer bn(std::make_unique<BatchNorm2d>(Shape{1, 2, 2}));
  bn.params = {2.0f, 1.0f, 0.5f, -1.0f};
  bn.state = {1.0f, -1.0f, 4.0f, 0.25f};  // means {1, -1}, variances {4, 0.25}
  Matrix y;
  bn.layer->forward(two_channel_batch(), y, Phase::eval);
  EXPECT_NEAR(y(0, 0), 2.0f * (1 - 1) / std::sqrt(4.0f + 1e-5f) + 0.5f, 1e-5f);
  EXPECT_NEAR(y(3, 1), 1.0f * (6 + 1) / std::sqrt(0.25f + 1e-5f) - 1.0f, 1e-4f);
  EXPECT_EQ(bn.state, (std::vector<float>{1.0f, -1.0f, 4.0f, 0.25f}));
}

TEST(BatchNorm2d, UntrackedTrainingLeavesRunningStatisticsAlone) {
  BoundLayer bn(std::make_unique<BatchNorm2d>(Shape{1, 2, 2}));
  bn.layer->set_track_state(false);
  Matrix y;
  bn.layer->forward(two_channel_batch(), y, Phase::train);
  EXPECT_EQ(bn.state, (std::vector<float>{0.0f, 0.0f, 1.0f, 1.0f}));
}

TEST(BatchNorm2d, TrainingGradientsMatchFiniteDifferences) {
  Rng rng(21);
  BoundLayer bn(std::make_unique<BatchNorm2d>(Shape{3, 2, 4}));
  for (auto& p : bn.params) {
    p = 0.5f + rng.uniform_float();
  }
  const Matrix x = random_matrix(24, 5, rng, 2.0f);
  testing::expect_input_gradient_matches(*bn.layer, x);
  testing::expect_param_gradient_matches(*bn.layer, bn.params, bn.grads, x);
}

// The input gradient's three terms matter only in training; evaluation is affine.
TEST(BatchNorm2d, EvaluationGradientsMatchFiniteDifferences) {
  Rng rng(22);
  BoundLayer bn(std::make_unique<BatchNorm2d>(Shape{2, 2, 3}));
  bn.state = {0.5f, -0.2f, 0.1f, 2.0f, 0.5f, 1.5f};
  for (auto& p : bn.params) {
    p = 0.5f + rng.uniform_float();
  }
  const Matrix x = random_matrix(12, 4, rng);
  Matrix y, dx;
  bn.layer->forward(x, y, Phase::eval);
  const Matrix r = random_matrix(12, 4, rng);
  bn.layer->backward(x, y, r, dx);
  bn.layer->gradient(x, r);
  // Evaluation is y = a x + b per channel: check against a, b directly.
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const auto c = static_cast<std::size_t>(i % 3);
    const float a = bn.params[c] / std::sqrt(bn.state[3 + c] + BatchNorm2d::kEpsilon);
    EXPECT_NEAR(dx.data()[i], r.data()[i] * a, 1e-5f);
  }
  double beta0 = 0;
  for (Eigen::Index i = 0; i < r.size(); i += 3) {
    beta0 += r.data()[i];
  }
  EXPECT_NEAR(bn.grads[3], beta0, 1e-4);
}

TEST(BatchNorm2d, ResultsDoNotDependOnTheThreadCount) {
  Rng rng(23);
  const Matrix x = random_matrix(8 * 8 * 16, 64, rng);
  const Matrix r = random_matrix(8 * 8 * 16, 64, rng);
  auto run = [&](int threads) {
    set_compute_threads(threads);
    BoundLayer bn(std::make_unique<BatchNorm2d>(Shape{8, 8, 16}));
    Matrix y, dx;
    bn.layer->forward(x, y, Phase::train);
    bn.layer->gradient(x, r);
    bn.layer->backward(x, y, r, dx);
    return std::tuple{y, dx, bn.grads, bn.state};
  };
  const auto one = run(1);
  const auto two = run(2);
  set_compute_threads(1);
  EXPECT_EQ(std::get<0>(one), std::get<0>(two));
  EXPECT_EQ(std::get<1>(one), std::get<1>(two));
  EXPECT_EQ(std::get<2>(one), std::get<2>(two));
  EXPECT_EQ(std::get<3>(one), std::get<3>(two));
}

// ---- DepthwiseConv2d -----------------------------------------------------------------

TEST(DepthwiseConv2d, ForwardMatchesHandComputedValues) {
  // 2x2 input, 2 channels, 2x2 kernel, no padding: one output pixel per channel.
  BoundLayer dw(std::make_unique<DepthwiseConv2d>(Shape{2, 2, 2}, DepthwiseOptions{2, 1, 0, true}));
  // weight {ky, kx, c}: channel 0 taps {1, 2, 3, 4}, channel 1 taps {-1, 0, 0, 1}; bias.
  dw.params = {1, -1, 2, 0, 3, 0, 4, 1, 0.5f, -0.5f};
  Matrix x(8, 1);
  x.col(0) << 1, 10, 2, 20, 3, 30, 4, 40;  // (0,0) (0,1) (1,0) (1,1), channels interleaved
  Matrix y;
  dw.layer->forward(x, y, Phase::eval);
  ASSERT_EQ(y.rows(), 2);
  EXPECT_FLOAT_EQ(y(0, 0), 1 * 1 + 2 * 2 + 3 * 3 + 4 * 4 + 0.5f);
  EXPECT_FLOAT_EQ(y(1, 0), -10 + 40 - 0.5f);
}

TEST(DepthwiseConv2d, GradientsMatchFiniteDifferences) {
  Rng rng(31);
  BoundLayer dw(std::make_unique<DepthwiseConv2d>(Shape{5, 4, 3}, DepthwiseOptions{3, 1, 1, true}));
  const Matrix x = random_matrix(60, 3, rng);
  testing::expect_input_gradient_matches(*dw.layer, x);
  testing::expect_param_gradient_matches(*dw.layer, dw.params, dw.grads, x);
}

TEST(DepthwiseConv2d, StridedGradientsMatchFiniteDifferences) {
  Rng rng(32);
  BoundLayer dw(
      std::make_unique<DepthwiseConv2d>(Shape{6, 5, 2}, DepthwiseOptions{3, 2, 1, false}));
  EXPECT_EQ(dw.layer->output_shape(), (Shape{3, 3, 2}));
  const Matrix x = random_matrix(60, 2, rng);
  testing::expect_input_gradient_matches(*dw.layer, x);
  testing::expect_param_gradient_matches(*dw.layer, dw.params, dw.grads, x);
}

TEST(DepthwiseConv2d, WeightGradientDoesNotDependOnTheThreadCount) {
  Rng rng(33);
  const Matrix x = random_matrix(8 * 8 * 12, 40, rng);
  const Matrix r = random_matrix(8 * 8 * 12, 40, rng);
  auto run = [&](int threads) {
    set_compute_threads(threads);
    BoundLayer dw(std::make_unique<DepthwiseConv2d>(Shape{8, 8, 12}, DepthwiseOptions{}));
    Matrix y;
    dw.layer->forward(x, y, Phase::train);
    dw.layer->gradient(x, r);
    return dw.grads;
  };
  const auto one = run(1);
  const auto two = run(2);
  set_compute_threads(1);
  EXPECT_EQ(one, two);
}

// ---- PointwiseConv2d -----------------------------------------------------------------

TEST(PointwiseConv2d, ForwardMixesChannelsAtEachPosition) {
  BoundLayer pw(std::make_unique<PointwiseConv2d>(Shape{1, 2, 2}, 1, true));
  pw.params = {3, -1, 0.5f};  // weight {cin=2, cout=1}, bias
  Matrix x(4, 1);
  x.col(0) << 1, 2, 10, 20;
  Matrix y;
  pw.layer->forward(x, y, Phase::eval);
  EXPECT_FLOAT_EQ(y(0, 0), 3 - 2 + 0.5f);
  EXPECT_FLOAT_EQ(y(1, 0), 30 - 20 + 0.5f);
}

TEST(PointwiseConv2d, GradientsMatchFiniteDifferences) {
  Rng rng(41);
  BoundLayer pw(std::make_unique<PointwiseConv2d>(Shape{3, 2, 4}, 5, true));
  const Matrix x = random_matrix(24, 3, rng);
  testing::expect_input_gradient_matches(*pw.layer, x);
  testing::expect_param_gradient_matches(*pw.layer, pw.params, pw.grads, x);
}

// ---- ReLU6, GlobalAvgPool2d ----------------------------------------------------------

TEST(ReLU6, ClampsToZeroAndSix) {
  ReLU6 relu6(Shape{4});
  Matrix x(4, 1), y;
  x.col(0) << -1, 3, 6.5f, 0.25f;
  relu6.forward(x, y, Phase::eval);
  EXPECT_EQ(y(0, 0), 0.0f);
  EXPECT_EQ(y(1, 0), 3.0f);
  EXPECT_EQ(y(2, 0), 6.0f);
  EXPECT_EQ(y(3, 0), 0.25f);
}

TEST(ReLU6, InputGradientMatchesFiniteDifferences) {
  // Values spread over [-2, 8], kept 0.1 away from both corners (more than the step).
  Rng rng(51);
  Matrix x = random_matrix(20, 3, rng, 5.0f);
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    float& v = x.data()[i];
    v += 3.0f;
    for (float corner : {0.0f, 6.0f}) {
      if (std::abs(v - corner) < 0.1f) {
        v = corner + 0.2f;
      }
    }
  }
  ReLU6 relu6(Shape{20});
  testing::expect_input_gradient_matches(relu6, x);
}

TEST(GlobalAvgPool2d, AveragesEachChannelOverPositions) {
  GlobalAvgPool2d pool(Shape{1, 2, 2});
  Matrix x(4, 1), y;
  x.col(0) << 1, 10, 3, 30;
  pool.forward(x, y, Phase::eval);
  ASSERT_EQ(y.rows(), 2);
  EXPECT_FLOAT_EQ(y(0, 0), 2.0f);
  EXPECT_FLOAT_EQ(y(1, 0), 20.0f);
  Rng rng(52);
  testing::expect_input_gradient_matches(pool, random_matrix(4, 3, rng));
}

// ---- InvertedResidual ----------------------------------------------------------------

TEST(InvertedResidual, ResidualOnlyWhenStrideOneAndChannelsKept) {
  EXPECT_TRUE(InvertedResidual(Shape{4, 4, 8}, {8, 1, 6}).has_residual());
  EXPECT_FALSE(InvertedResidual(Shape{4, 4, 8}, {8, 2, 6}).has_residual());
  EXPECT_FALSE(InvertedResidual(Shape{4, 4, 8}, {16, 1, 6}).has_residual());
  // Expansion 1 has no expand convolution: depthwise, bn, relu6, project, bn.
  EXPECT_EQ(InvertedResidual(Shape{4, 4, 8}, {8, 1, 1}).sublayer_count(), 5u);
  EXPECT_EQ(InvertedResidual(Shape{4, 4, 8}, {8, 1, 6}).sublayer_count(), 8u);
}

TEST(InvertedResidual, NamesItsTensorsUnderItsSublayers) {
  BoundLayer block(
      std::make_unique<InvertedResidual>(Shape{4, 4, 8}, InvertedResidualOptions{8, 1, 2}));
  const auto params = block.layer->param_shapes();
  ASSERT_EQ(params.size(), 9u);
  EXPECT_EQ(params[0].name, "expand.weight");
  EXPECT_EQ(params[0].shape, (Shape{8, 16}));
  EXPECT_EQ(params[3].name, "depthwise.weight");
  EXPECT_EQ(params[3].shape, (Shape{3, 3, 16}));
  EXPECT_EQ(params[8].name, "project_bn.bias");
  const auto state = block.layer->state_shapes();
  ASSERT_EQ(state.size(), 6u);
  EXPECT_EQ(state[5].name, "project_bn.running_var");
}

void expect_block_gradients_match(const Shape& shape, InvertedResidualOptions options,
                                  std::uint64_t seed) {
  Rng rng(seed);
  BoundLayer block(std::make_unique<InvertedResidual>(shape, options), seed);
  // Random BatchNorm scales, so each sub-layer's gradient is exercised off its identity.
  for (auto& p : block.params) {
    p += 0.3f * (2.0f * rng.uniform_float() - 1.0f);
  }
  const Matrix x = random_matrix(static_cast<Eigen::Index>(element_count(shape)), 4, rng);
  testing::expect_gradients_match_away_from_kinks(*block.layer, block.params, block.grads, x);
}

TEST(InvertedResidual, ResidualBlockGradientsMatchFiniteDifferences) {
  expect_block_gradients_match(Shape{4, 4, 4}, {4, 1, 3}, 61);
}

TEST(InvertedResidual, StridedBlockGradientsMatchFiniteDifferences) {
  expect_block_gradients_match(Shape{5, 5, 3}, {6, 2, 2}, 62);
}

TEST(InvertedResidual, UnexpandedBlockGradientsMatchFiniteDifferences) {
  expect_block_gradients_match(Shape{4, 3, 4}, {5, 1, 1}, 63);
}

// Model::backward calls gradient() then backward() with the same grad_output: the block
// hands over the input gradient it found instead of a second pass, and both agree.
TEST(InvertedResidual, BackwardAfterGradientGivesTheSameInputGradient) {
  Rng rng(64);
  BoundLayer block(
      std::make_unique<InvertedResidual>(Shape{4, 4, 4}, InvertedResidualOptions{4, 1, 2}));
  const Matrix x = random_matrix(64, 3, rng);
  const Matrix r = random_matrix(64, 3, rng);
  Matrix y, alone, handed;
  block.layer->forward(x, y, Phase::train);
  block.layer->backward(x, y, r, alone);
  block.layer->forward(x, y, Phase::train);
  block.layer->gradient(x, r);
  block.layer->backward(x, y, r, handed);
  EXPECT_EQ(alone, handed);
}

// ---- The model's state buffer --------------------------------------------------------

TEST(ModelState, CollectsRunningStatisticsAndSurvivesCopies) {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<PointwiseConv2d>(Shape{2, 2, 3}, 4));
  layers.back()->set_name("conv");
  layers.push_back(std::make_unique<BatchNorm2d>(Shape{2, 2, 4}));
  layers.back()->set_name("bn");
  Model model(Shape{2, 2, 3}, std::move(layers));
  model.initialize(1);
  ASSERT_EQ(model.state().size(), 8u);
  EXPECT_EQ(model.state_layout().entries()[1].name, "bn.running_var");
  EXPECT_EQ(model.param_count(), 12u + 8u);
  Rng rng(2);
  const Matrix x = random_matrix(12, 5, rng);
  model.forward(x, Phase::train);
  const std::vector<float> after_step(model.state().begin(), model.state().end());
  EXPECT_NE(after_step[0], 0.0f);
  Model copy = model;
  EXPECT_TRUE(std::equal(copy.state().begin(), copy.state().end(), after_step.begin()));
  // The copy's layers write the copy's state, not the original's.
  copy.forward(x, Phase::train);
  EXPECT_TRUE(std::equal(model.state().begin(), model.state().end(), after_step.begin()));
  EXPECT_FALSE(std::equal(copy.state().begin(), copy.state().end(), after_step.begin()));
}

}  // namespace
}  // namespace fedcore::model
