// ReLU, Flatten and Dropout: the parameter-free element-wise layers.
#include "shared/model/layers.hpp"
#include "shared/model/parallel_chunks.hpp"
#include "shared/model/update_kernels.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {

std::unique_ptr<Layer> ReLU::clone() const {
  return std::make_unique<ReLU>(*this);
}

// The element-wise passes are split across the compute threads: on the cnn they touch
// tens of megabytes per step and would otherwise be the serial part of a parallel step.
void ReLU::forward(const Matrix& input, Matrix& output, Phase) {
  output.resize(input.rows(), input.cols());
  const float* x = input.data();
  float* y = output.data();
  const Eigen::Index n = input.size();
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (Eigen::Index i = 0; i < n; ++i) {
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }
}

void ReLU::backward(const Matrix&, const Matrix& output, const Matrix& grad_output,
                    Matrix& grad_input) {
  grad_input.resize(grad_output.rows(), grad_output.cols());
  // A plain loop (dispatched by instruction set); Eigen's select() here ran 5x slower.
  // The derivative at 0 is taken as 0, as PyTorch does.
  const float* y = output.data();
  const float* dy = grad_output.data();
  float* dx = grad_input.data();
  const auto n = static_cast<std::size_t>(grad_output.size());
  for_each_chunk(n, std::size_t{1} << 16, [&](std::size_t begin, std::size_t end) {
    kernels::relu_backward(y, dy, dx, begin, end);
  });
}

Flatten::Flatten(const Shape& input_shape)
    : Layer(input_shape, Shape{static_cast<std::int64_t>(element_count(input_shape))}) {}

std::unique_ptr<Layer> Flatten::clone() const {
  return std::make_unique<Flatten>(*this);
}

void Flatten::forward(const Matrix& input, Matrix& output, Phase) {
  output = input;
}

void Flatten::backward(const Matrix&, const Matrix&, const Matrix& grad_output,
                       Matrix& grad_input) {
  grad_input = grad_output;
}

Dropout::Dropout(const Shape& input_shape, float rate)
    : Layer(input_shape, input_shape), rate_(rate) {
  FEDCORE_ASSERT(rate >= 0.0f && rate < 1.0f, "Dropout rate must be in [0, 1)");
}

std::unique_ptr<Layer> Dropout::clone() const {
  return std::make_unique<Dropout>(*this);
}

void Dropout::initialize(Rng& rng) {
  rng_ = rng.split();
}

void Dropout::forward(const Matrix& input, Matrix& output, Phase phase) {
  masked_ = phase == Phase::train && rate_ > 0.0f;
  if (!masked_) {
    output = input;
    return;
  }
  const float keep_scale = 1.0f / (1.0f - rate_);
  mask_.resize(input.rows(), input.cols());
  float* m = mask_.data();
  for (Eigen::Index i = 0; i < mask_.size(); ++i) {
    m[i] = rng_.uniform_float() < rate_ ? 0.0f : keep_scale;
  }
  output = input.cwiseProduct(mask_);
}

void Dropout::backward(const Matrix&, const Matrix&, const Matrix& grad_output,
                       Matrix& grad_input) {
  if (masked_) {
    grad_input = grad_output.cwiseProduct(mask_);
  } else {
    grad_input = grad_output;
  }
}

}  // namespace fedcore::model
