// ReLU6 and GlobalAvgPool2d: MobileNetV2's parameter-free layers.
#include "shared/model/mobile_layers.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {

std::unique_ptr<Layer> ReLU6::clone() const {
  return std::make_unique<ReLU6>(*this);
}

void ReLU6::forward(const Matrix& input, Matrix& output, Phase) {
  output.resize(input.rows(), input.cols());
  const float* x = input.data();
  float* y = output.data();
  const Eigen::Index n = input.size();
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (Eigen::Index i = 0; i < n; ++i) {
    y[i] = x[i] < 0.0f ? 0.0f : (x[i] > 6.0f ? 6.0f : x[i]);
  }
}

// Read from the output: strictly inside (0, 6) the input passed through unchanged.
void ReLU6::backward(const Matrix&, const Matrix& output, const Matrix& grad_output,
                     Matrix& grad_input) {
  grad_input.resize(grad_output.rows(), grad_output.cols());
  const float* y = output.data();
  const float* dy = grad_output.data();
  float* dx = grad_input.data();
  const Eigen::Index n = grad_output.size();
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (Eigen::Index i = 0; i < n; ++i) {
    dx[i] = (y[i] > 0.0f && y[i] < 6.0f) ? dy[i] : 0.0f;
  }
}

GlobalAvgPool2d::GlobalAvgPool2d(const Shape& input_shape)
    : Layer(input_shape, input_shape.size() == 3 ? Shape{input_shape[2]} : Shape{}) {
  FEDCORE_ASSERT(input_shape.size() == 3 && input_shape[2] >= 1,
                 "GlobalAvgPool2d needs an {H, W, C} input");
}

std::unique_ptr<Layer> GlobalAvgPool2d::clone() const {
  return std::make_unique<GlobalAvgPool2d>(*this);
}

// A sample's column is a C x (H W) matrix; its row means are the output column.
void GlobalAvgPool2d::forward(const Matrix& input, Matrix& output, Phase) {
  const Eigen::Index c = input_shape()[2];
  const Eigen::Index positions = input_shape()[0] * input_shape()[1];
  output.resize(c, input.cols());
  for (Eigen::Index n = 0; n < input.cols(); ++n) {
    Eigen::Map<const Matrix> sample(input.data() + n * input.rows(), c, positions);
    output.col(n) = sample.rowwise().sum() / static_cast<float>(positions);
  }
}

void GlobalAvgPool2d::backward(const Matrix&, const Matrix&, const Matrix& grad_output,
                               Matrix& grad_input) {
  const Eigen::Index c = input_shape()[2];
  const Eigen::Index positions = input_shape()[0] * input_shape()[1];
  grad_input.resize(c * positions, grad_output.cols());
  const float scale = 1.0f / static_cast<float>(positions);
  for (Eigen::Index n = 0; n < grad_output.cols(); ++n) {
    MatrixMap sample(grad_input.data() + n * grad_input.rows(), c, positions);
    sample.colwise() = grad_output.col(n) * scale;
  }
}

}  // namespace fedcore::model
