// InvertedResidual: MobileNetV2's block (Sandler et al. 2018, figure 3b / table 1), a layer
// made of layers.
//
//   [expand: 1x1 conv to t*cin, BatchNorm, ReLU6]   (only when the expansion t > 1)
//   depthwise 3x3 conv (stride s, padding 1), BatchNorm, ReLU6
//   project: 1x1 conv to cout, BatchNorm             (linear bottleneck: no activation)
//   + the block's input, when s == 1 and cin == cout (the residual connection)
//
// The sub-layers' parameters and state tile the block's slices in that order, named
// "<sub>.<param>" under the block ("block3.expand.weight", "block3.project_bn.running_var").
// torchvision's names for the same tensors are "features.3.conv.0.0.weight", ...
//
// Back-propagation inside a block needs every sub-layer's output gradient for both the
// parameter and the input gradient, so `gradient` does the whole internal pass and keeps
// the input gradient it found; the `backward` that Model calls next with the same
// grad_output hands it over instead of repeating the pass. A `backward` without that
// preceding `gradient` (or after another forward) does its own pass.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "shared/model/layer.hpp"

namespace fedcore::model {

struct InvertedResidualOptions {
  std::int64_t out_channels = 1;
  std::int64_t stride = 1;     // 1 or 2, of the depthwise convolution
  std::int64_t expansion = 6;  // t: hidden channels = t * input channels
};

class InvertedResidual final : public Layer {
 public:
  // REQUIRES: input_shape is {H, W, C}; out_channels, stride, expansion >= 1.
  InvertedResidual(const Shape& input_shape, const InvertedResidualOptions& options);

  std::unique_ptr<Layer> clone() const override;
  std::string_view kind() const override { return "inverted_residual"; }
  std::vector<ParamShape> param_shapes() const override;
  std::vector<ParamShape> state_shapes() const override;
  void bind(std::span<float> params, std::span<float> grads) override;
  void bind_state(std::span<float> state) override;
  void set_track_state(bool track) override;
  void initialize(Rng& rng) override;
  void forward(const Matrix& input, Matrix& output, Phase phase) override;
  void backward(const Matrix& input, const Matrix& output, const Matrix& grad_output,
                Matrix& grad_input) override;
  void gradient(const Matrix& input, const Matrix& grad_output) override;

  bool has_residual() const noexcept { return residual_; }
  std::size_t sublayer_count() const noexcept { return layers_.size(); }
  const Layer& sublayer(std::size_t i) const { return *layers_[i]; }

 private:
  InvertedResidual(const InvertedResidual& other);
  // Back-propagates grad_output through the sub-layers (in reverse), writing their parameter
  // gradients when `with_params`, and leaves d loss / d (block input) in grad_input.
  void backprop(const Matrix& input, const Matrix& grad_output, bool with_params,
                Matrix& grad_input);

  InvertedResidualOptions options_;
  bool residual_ = false;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Matrix> activations_;  // activations_[i]: sub-layer i's output
  std::vector<Matrix> grads_;        // grads_[i]: d loss / d (sub-layer i's input), i >= 1
  // The input gradient `gradient` found, and the grad_output it was found for.
  Matrix pending_input_grad_;
  const float* pending_for_ = nullptr;
};

}  // namespace fedcore::model
