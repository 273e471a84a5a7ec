#include "shared/model/gemm.hpp"
#include "shared/model/init.hpp"
#include "shared/model/layers.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {

Dense::Dense(const Shape& input_shape, std::int64_t units)
    : Layer(input_shape, Shape{units}),
      in_(static_cast<std::int64_t>(element_count(input_shape))),
      out_(units) {
  FEDCORE_ASSERT(units > 0 && in_ > 0, "Dense needs positive sizes");
}

// Views are not copied: the clone is unbound until its model binds it.
Dense::Dense(const Dense& other) : Layer(other), in_(other.in_), out_(other.out_) {}

std::unique_ptr<Layer> Dense::clone() const {
  return std::unique_ptr<Layer>(new Dense(*this));
}

std::vector<ParamShape> Dense::param_shapes() const {
  return {{"weight", {in_, out_}}, {"bias", {out_}}};
}

void Dense::bind(std::span<float> params, std::span<float> grads) {
  const auto weights = static_cast<std::size_t>(in_ * out_);
  FEDCORE_ASSERT(
      params.size() == weights + static_cast<std::size_t>(out_) && grads.size() == params.size(),
      "Dense::bind: slice size mismatch");
  new (&weight_) MatrixMap(params.data(), out_, in_);
  new (&bias_) VectorMap(params.data() + weights, out_);
  new (&weight_grad_) MatrixMap(grads.data(), out_, in_);
  new (&bias_grad_) VectorMap(grads.data() + weights, out_);
}

void Dense::initialize(Rng& rng) {
  glorot_uniform({weight_.data(), static_cast<std::size_t>(weight_.size())}, double(in_),
                 double(out_), rng);
  bias_.setZero();
}

void Dense::forward(const Matrix& input, Matrix& output, Phase) {
  FEDCORE_ASSERT(input.rows() == in_,
                 "Dense::forward: input rows differ from the layer's input size");
  output.resize(out_, input.cols());
  gemm::multiply({weight_.data(), out_, in_}, {input.data(), in_, input.cols()}, output.data());
  output.colwise() += bias_;
}

void Dense::backward(const Matrix&, const Matrix&, const Matrix& grad_output, Matrix& grad_input) {
  grad_input.resize(in_, grad_output.cols());
  gemm::multiply({weight_.data(), out_, in_, true}, {grad_output.data(), out_, grad_output.cols()},
                 grad_input.data());
}

void Dense::gradient(const Matrix& input, const Matrix& grad_output) {
  gemm::multiply({grad_output.data(), out_, grad_output.cols()},
                 {input.data(), in_, input.cols(), true}, weight_grad_.data());
  bias_grad_ = grad_output.rowwise().sum();
}

}  // namespace fedcore::model
