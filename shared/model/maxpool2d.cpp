#include <algorithm>
#include <limits>

#include "shared/model/layers.hpp"
#include "shared/model/update_kernels.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {
namespace {

Shape pooled_shape(const Shape& in, std::int64_t kernel, std::int64_t stride) {
  FEDCORE_ASSERT(in.size() == 3, "MaxPool2d needs an {H, W, C} input");
  FEDCORE_ASSERT(kernel > 0 && stride > 0 && kernel <= in[0] && kernel <= in[1],
                 "MaxPool2d: kernel must be positive and fit the input");
  return {(in[0] - kernel) / stride + 1, (in[1] - kernel) / stride + 1, in[2]};
}

}  // namespace

MaxPool2d::MaxPool2d(const Shape& input_shape, std::int64_t kernel, std::int64_t stride)
    : Layer(input_shape, pooled_shape(input_shape, kernel, stride > 0 ? stride : kernel)),
      in_h_(input_shape[0]),
      in_w_(input_shape[1]),
      c_(input_shape[2]),
      out_h_(output_shape()[0]),
      out_w_(output_shape()[1]),
      kernel_(kernel),
      stride_(stride > 0 ? stride : kernel) {}

std::unique_ptr<Layer> MaxPool2d::clone() const {
  return std::make_unique<MaxPool2d>(*this);
}

void MaxPool2d::forward(const Matrix& input, Matrix& output, Phase) {
  FEDCORE_ASSERT(input.rows() == static_cast<Eigen::Index>(input_size()),
                 "MaxPool2d::forward: input rows differ from H*W*C");
  const auto batch = input.cols();
  const auto out_rows = static_cast<Eigen::Index>(output_size());
  output.resize(out_rows, batch);
  argmax_.resize(static_cast<std::size_t>(out_rows * batch));
  const kernels::PoolGeometry geometry{in_w_, out_h_, out_w_, c_, kernel_, stride_};
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < batch; ++b) {
    kernels::max_pool_sample(input.col(b).data(), output.col(b).data(),
                             argmax_.data() + b * out_rows, geometry);
  }
}

void MaxPool2d::backward(const Matrix& input, const Matrix&, const Matrix& grad_output,
                         Matrix& grad_input) {
  const auto batch = grad_output.cols();
  const auto out_rows = grad_output.rows();
  const auto in_rows = input.rows();
  grad_input.resize(in_rows, batch);
  // Each sample's gradient is zeroed just before its scatter, while it is in this core's
  // cache (one setZero of the whole batch beforehand went through memory twice).
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < batch; ++b) {
    const float* dy = grad_output.col(b).data();
    float* dx = grad_input.col(b).data();
    std::fill_n(dx, in_rows, 0.0f);
    const std::int32_t* arg = argmax_.data() + b * out_rows;
    for (Eigen::Index i = 0; i < out_rows; ++i) {
      dx[arg[i]] += dy[i];
    }
  }
}

}  // namespace fedcore::model
