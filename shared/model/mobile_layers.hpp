// The layers of MobileNetV2 (Sandler et al. 2018): BatchNorm2d, depthwise and pointwise
// convolutions, ReLU6 and global average pooling. InvertedResidual (inverted_residual.hpp)
// composes them into the network's block.
//
// All take HWC images (channels fastest), so a batch of N samples of {H, W, C} is, in
// memory, a C x (H W N) column-major matrix: the per-channel layers walk it as such.
//
// Parameter layout, row-major (see layout.hpp), PyTorch's order in brackets:
//   BatchNorm2d      weight {C} bias {C};   state running_mean {C} running_var {C}
//   DepthwiseConv2d  weight {k, k, C}        [C, 1, k, k]      bias {C} if asked
//   PointwiseConv2d  weight {cin, cout}      [cout, cin, 1, 1] bias {cout} if asked
// Initialisation follows torchvision's MobileNetV2: convolution weights He-normal with
// fan_out, BatchNorm weight 1 and bias 0, running mean 0 and variance 1.
//
// Results do not depend on the compute-thread count: every sum over the batch is taken in
// fixed chunks, added in chunk order.
#pragma once

#include <cstdint>
#include <vector>

#include "shared/model/layer.hpp"

namespace fedcore::model {

// Batch normalisation over (H, W, N) per channel (Ioffe and Szegedy 2015), as PyTorch's
// BatchNorm2d: eps 1e-5, momentum 0.1, the running variance updated with the unbiased
// batch variance and normalisation with the biased one.
//
// Training (Phase::train) normalises with the batch's statistics and moves the running
// statistics toward them; evaluation normalises with the running statistics and never
// changes them. backward/gradient follow whichever phase the latest forward ran in.
// The input may be any shape whose last dimension is the channels ({C} for a dense
// layer's output works too).
class BatchNorm2d final : public Layer {
 public:
  static constexpr float kEpsilon = 1e-5f;
  static constexpr float kMomentum = 0.1f;

  // REQUIRES: input_shape non-empty, last dimension >= 1.
  explicit BatchNorm2d(const Shape& input_shape);

  std::unique_ptr<Layer> clone() const override;
  std::string_view kind() const override { return "batchnorm2d"; }
  std::vector<ParamShape> param_shapes() const override;
  std::vector<ParamShape> state_shapes() const override;
  void bind(std::span<float> params, std::span<float> grads) override;
  void bind_state(std::span<float> state) override;
  void set_track_state(bool track) override { track_ = track; }
  void initialize(Rng& rng) override;
  void forward(const Matrix& input, Matrix& output, Phase phase) override;
  void backward(const Matrix& input, const Matrix& output, const Matrix& grad_output,
                Matrix& grad_input) override;
  void gradient(const Matrix& input, const Matrix& grad_output) override;

 private:
  BatchNorm2d(const BatchNorm2d& other);

  std::int64_t channels_;
  std::span<float> gamma_, beta_, gamma_grad_, beta_grad_;
  std::span<float> running_mean_, running_var_;
  bool track_ = true;
  // sum(dy) and sum(dy x_hat) per channel for the latest training forward, into sum_dy_
  // and sum_dy_n_; remembers which grad_output they belong to.
  void training_sums(const Matrix& grad_output);

  // Of the latest forward: the phase, the normalised input and 1 / sqrt(var + eps).
  Phase phase_ = Phase::eval;
  Matrix normalized_;
  std::vector<float> inv_std_;
  // The sums gradient() found, kept for the backward() that Model calls next with the same
  // grad_output (sums_for_ is its data; null after a forward or once used).
  std::vector<double> sum_dy_, sum_dy_n_;
  const float* sums_for_ = nullptr;
};

struct DepthwiseOptions {
  std::int64_t kernel = 3;  // square kernel
  std::int64_t stride = 1;
  std::int64_t padding = 1;  // zero padding on each side
  bool bias = false;
};

// One k x k filter per channel (groups = channels), computed directly: each output pixel's
// C values are one vectorised multiply-add per kernel tap over a contiguous run of the
// input. There is no GEMM to hand this to (each channel's filter has k^2 weights), so the
// layer is bound by memory, not arithmetic.
class DepthwiseConv2d final : public Layer {
 public:
  // REQUIRES: input_shape is {H, W, C}, kernel <= H + 2 padding and W + 2 padding.
  DepthwiseConv2d(const Shape& input_shape, const DepthwiseOptions& options);

  std::unique_ptr<Layer> clone() const override;
  std::string_view kind() const override { return "depthwise_conv2d"; }
  std::vector<ParamShape> param_shapes() const override;
  void bind(std::span<float> params, std::span<float> grads) override;
  void initialize(Rng& rng) override;
  void forward(const Matrix& input, Matrix& output, Phase phase) override;
  void backward(const Matrix& input, const Matrix& output, const Matrix& grad_output,
                Matrix& grad_input) override;
  void gradient(const Matrix& input, const Matrix& grad_output) override;

 private:
  DepthwiseConv2d(const DepthwiseConv2d& other);

  std::int64_t in_h_, in_w_, c_, out_h_, out_w_;
  DepthwiseOptions options_;
  std::span<float> weight_, bias_, weight_grad_, bias_grad_;
  std::vector<std::vector<float>> chunk_grads_;  // one weight+bias gradient per sample chunk
};

// A 1 x 1 convolution, stride 1: on HWC data one GEMM of the {cout, cin} weight with the
// batch seen as a cin x (H W N) matrix, with no im2col.
class PointwiseConv2d final : public Layer {
 public:
  // REQUIRES: input_shape is {H, W, C}, out_channels >= 1.
  PointwiseConv2d(const Shape& input_shape, std::int64_t out_channels, bool bias = false);

  std::unique_ptr<Layer> clone() const override;
  std::string_view kind() const override { return "pointwise_conv2d"; }
  std::vector<ParamShape> param_shapes() const override;
  void bind(std::span<float> params, std::span<float> grads) override;
  void initialize(Rng& rng) override;
  void forward(const Matrix& input, Matrix& output, Phase phase) override;
  void backward(const Matrix& input, const Matrix& output, const Matrix& grad_output,
                Matrix& grad_input) override;
  void gradient(const Matrix& input, const Matrix& grad_output) override;

 private:
  PointwiseConv2d(const PointwiseConv2d& other);

  std::int64_t positions_, cin_, cout_;
  bool has_bias_;
  float* weight_ = nullptr;
  float* weight_grad_ = nullptr;
  std::span<float> bias_, bias_grad_;
};

// min(max(x, 0), 6). The derivative is 1 strictly inside (0, 6), 0 elsewhere (PyTorch's
// hardtanh convention at the corners).
class ReLU6 final : public Layer {
 public:
  explicit ReLU6(const Shape& input_shape) : Layer(input_shape, input_shape) {}
  std::unique_ptr<Layer> clone() const override;
  std::string_view kind() const override { return "relu6"; }
  void forward(const Matrix& input, Matrix& output, Phase phase) override;
  void backward(const Matrix& input, const Matrix& output, const Matrix& grad_output,
                Matrix& grad_input) override;
};

// {H, W, C} -> {C}: the mean of each channel over all positions.
class GlobalAvgPool2d final : public Layer {
 public:
  // REQUIRES: input_shape is {H, W, C}.
  explicit GlobalAvgPool2d(const Shape& input_shape);
  std::unique_ptr<Layer> clone() const override;
  std::string_view kind() const override { return "global_avg_pool2d"; }
  void forward(const Matrix& input, Matrix& output, Phase phase) override;
  void backward(const Matrix& input, const Matrix& output, const Matrix& grad_output,
                Matrix& grad_input) override;
};

}  // namespace fedcore::model
