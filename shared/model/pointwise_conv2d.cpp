#include <algorithm>
#include <cmath>

#include "shared/model/gemm.hpp"
#include "shared/model/mobile_layers.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {

PointwiseConv2d::PointwiseConv2d(const Shape& input_shape, std::int64_t out_channels, bool bias)
    : Layer(input_shape, input_shape.size() == 3
                             ? Shape{input_shape[0], input_shape[1], out_channels}
                             : Shape{}),
      positions_(input_shape.size() == 3 ? input_shape[0] * input_shape[1] : 0),
      cin_(input_shape.size() == 3 ? input_shape[2] : 0),
      cout_(out_channels),
      has_bias_(bias) {
  FEDCORE_ASSERT(input_shape.size() == 3 && cin_ >= 1 && out_channels >= 1,
                 "PointwiseConv2d needs an {H, W, C} input and at least one output channel");
}

PointwiseConv2d::PointwiseConv2d(const PointwiseConv2d& other)
    : Layer(other),
      positions_(other.positions_),
      cin_(other.cin_),
      cout_(other.cout_),
      has_bias_(other.has_bias_) {}

std::unique_ptr<Layer> PointwiseConv2d::clone() const {
  return std::unique_ptr<Layer>(new PointwiseConv2d(*this));
}

std::vector<ParamShape> PointwiseConv2d::param_shapes() const {
  std::vector<ParamShape> shapes{{"weight", {cin_, cout_}}};
  if (has_bias_) {
    shapes.push_back({"bias", {cout_}});
  }
  return shapes;
}

void PointwiseConv2d::bind(std::span<float> params, std::span<float> grads) {
  const auto weights = static_cast<std::size_t>(cin_ * cout_);
  FEDCORE_ASSERT(params.size() == weights + (has_bias_ ? static_cast<std::size_t>(cout_) : 0) &&
                     grads.size() == params.size(),
                 "PointwiseConv2d::bind: slice size mismatch");
  weight_ = params.data();
  weight_grad_ = grads.data();
  bias_ = params.subspan(weights);
  bias_grad_ = grads.subspan(weights);
}

// He-normal with fan_out = cout (a 1 x 1 kernel), as torchvision.
void PointwiseConv2d::initialize(Rng& rng) {
  const float stddev = static_cast<float>(std::sqrt(2.0 / double(cout_)));
  for (std::int64_t i = 0; i < cin_ * cout_; ++i) {
    weight_[i] = stddev * static_cast<float>(rng.normal());
  }
  std::fill(bias_.begin(), bias_.end(), 0.0f);
}

// The {cin, cout} row-major weight is a cout x cin column-major matrix W; the batch is a
// cin x (positions N) matrix X; Y = W X is the output's memory as it stands.
void PointwiseConv2d::forward(const Matrix& input, Matrix& output, Phase) {
  FEDCORE_ASSERT(input.rows() == static_cast<Eigen::Index>(input_size()),
                 "PointwiseConv2d::forward: input rows differ from the layer's input size");
  const std::int64_t columns = positions_ * input.cols();
  output.resize(static_cast<Eigen::Index>(positions_ * cout_), input.cols());
  gemm::multiply({weight_, cout_, cin_}, {input.data(), cin_, columns}, output.data());
  if (has_bias_) {
    MatrixMap y(output.data(), cout_, columns);
    y.colwise() += Eigen::Map<const Eigen::VectorXf>(bias_.data(), cout_);
  }
}

void PointwiseConv2d::backward(const Matrix&, const Matrix&, const Matrix& grad_output,
                               Matrix& grad_input) {
  const std::int64_t columns = positions_ * grad_output.cols();
  grad_input.resize(static_cast<Eigen::Index>(positions_ * cin_), grad_output.cols());
  gemm::multiply({weight_, cout_, cin_, true}, {grad_output.data(), cout_, columns},
                 grad_input.data());
}

void PointwiseConv2d::gradient(const Matrix& input, const Matrix& grad_output) {
  const std::int64_t columns = positions_ * grad_output.cols();
  gemm::multiply({grad_output.data(), cout_, columns}, {input.data(), cin_, columns, true},
                 weight_grad_);
  if (has_bias_) {
    Eigen::Map<const Matrix> dy(grad_output.data(), cout_, columns);
    Eigen::Map<Eigen::VectorXf>(bias_grad_.data(), cout_) = dy.rowwise().sum();
  }
}

}  // namespace fedcore::model
