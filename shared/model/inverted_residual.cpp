#include "shared/model/inverted_residual.hpp"

#include "shared/model/layers.hpp"
#include "shared/model/mobile_layers.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {

namespace {

template <class L, class... Args>
void add(std::vector<std::unique_ptr<Layer>>& layers, std::string name, Args&&... args) {
  const Shape& input = layers.back()->output_shape();
  layers.push_back(std::make_unique<L>(input, std::forward<Args>(args)...));
  layers.back()->set_name(std::move(name));
}

std::size_t total_size(const std::vector<ParamShape>& shapes) {
  std::size_t n = 0;
  for (const auto& s : shapes) {
    n += element_count(s.shape);
  }
  return n;
}

}  // namespace

InvertedResidual::InvertedResidual(const Shape& input_shape, const InvertedResidualOptions& options)
    : Layer(input_shape, Shape{}), options_(options) {
  FEDCORE_ASSERT(input_shape.size() == 3 && options.out_channels >= 1 && options.stride >= 1 &&
                     options.expansion >= 1,
                 "InvertedResidual needs an {H, W, C} input and positive options");
  const std::int64_t in_c = input_shape[2];
  const std::int64_t hidden = in_c * options.expansion;
  residual_ = options.stride == 1 && in_c == options.out_channels;
  // The first sub-layer is built on the block's input shape; `add` chains the rest.
  if (options.expansion != 1) {
    layers_.push_back(std::make_unique<PointwiseConv2d>(input_shape, hidden));
    layers_.back()->set_name("expand");
    add<BatchNorm2d>(layers_, "expand_bn");
    add<ReLU6>(layers_, "expand_relu");
    add<DepthwiseConv2d>(layers_, "depthwise", DepthwiseOptions{3, options.stride, 1, false});
  } else {
    layers_.push_back(std::make_unique<DepthwiseConv2d>(
        input_shape, DepthwiseOptions{3, options.stride, 1, false}));
    layers_.back()->set_name("depthwise");
  }
  add<BatchNorm2d>(layers_, "depthwise_bn");
  add<ReLU6>(layers_, "depthwise_relu");
  add<PointwiseConv2d>(layers_, "project", options.out_channels);
  add<BatchNorm2d>(layers_, "project_bn");
  set_output_shape(layers_.back()->output_shape());
  activations_.resize(layers_.size());
  grads_.resize(layers_.size());
}

InvertedResidual::InvertedResidual(const InvertedResidual& other)
    : Layer(other),
      options_(other.options_),
      residual_(other.residual_),
      activations_(other.layers_.size()),
      grads_(other.layers_.size()) {
  for (const auto& layer : other.layers_) {
    layers_.push_back(layer->clone());
  }
}

std::unique_ptr<Layer> InvertedResidual::clone() const {
  return std::unique_ptr<Layer>(new InvertedResidual(*this));
}

std::vector<ParamShape> InvertedResidual::param_shapes() const {
  std::vector<ParamShape> shapes;
  for (const auto& layer : layers_) {
    for (auto& p : layer->param_shapes()) {
      shapes.push_back({layer->name() + "." + p.name, std::move(p.shape), p.normalization});
    }
  }
  return shapes;
}

std::vector<ParamShape> InvertedResidual::state_shapes() const {
  std::vector<ParamShape> shapes;
  for (const auto& layer : layers_) {
    for (auto& s : layer->state_shapes()) {
      shapes.push_back({layer->name() + "." + s.name, std::move(s.shape)});
    }
  }
  return shapes;
}

void InvertedResidual::bind(std::span<float> params, std::span<float> grads) {
  FEDCORE_ASSERT(params.size() == total_size(param_shapes()) && grads.size() == params.size(),
                 "InvertedResidual::bind: slice size mismatch");
  std::size_t offset = 0;
  for (auto& layer : layers_) {
    const std::size_t size = total_size(layer->param_shapes());
    layer->bind(params.subspan(offset, size), grads.subspan(offset, size));
    offset += size;
  }
}

void InvertedResidual::bind_state(std::span<float> state) {
  FEDCORE_ASSERT(state.size() == total_size(state_shapes()),
                 "InvertedResidual::bind_state: slice size mismatch");
  std::size_t offset = 0;
  for (auto& layer : layers_) {
    const std::size_t size = total_size(layer->state_shapes());
    layer->bind_state(state.subspan(offset, size));
    offset += size;
  }
}

void InvertedResidual::set_track_state(bool track) {
  for (auto& layer : layers_) {
    layer->set_track_state(track);
  }
}

void InvertedResidual::initialize(Rng& rng) {
  for (auto& layer : layers_) {
    Rng layer_rng = rng.split();
    layer->initialize(layer_rng);
  }
}

void InvertedResidual::forward(const Matrix& input, Matrix& output, Phase phase) {
  pending_for_ = nullptr;
  const Matrix* x = &input;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->forward(*x, activations_[i], phase);
    x = &activations_[i];
  }
  if (residual_) {
    output.resize(x->rows(), x->cols());
    output.noalias() = *x + input;
  } else {
    output = *x;
  }
}

void InvertedResidual::backprop(const Matrix& input, const Matrix& grad_output, bool with_params,
                                Matrix& grad_input) {
  const Matrix* dy = &grad_output;
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const Matrix& x = i == 0 ? input : activations_[i - 1];
    if (with_params) {
      layers_[i]->gradient(x, *dy);
    }
    Matrix& dx = i == 0 ? grad_input : grads_[i];
    layers_[i]->backward(x, activations_[i], *dy, dx);
    dy = &dx;
  }
  // The residual branch passes grad_output straight to the input.
  if (residual_) {
    grad_input += grad_output;
  }
}

void InvertedResidual::gradient(const Matrix& input, const Matrix& grad_output) {
  backprop(input, grad_output, true, pending_input_grad_);
  pending_for_ = grad_output.data();
}

void InvertedResidual::backward(const Matrix& input, const Matrix&, const Matrix& grad_output,
                                Matrix& grad_input) {
  if (pending_for_ != nullptr && pending_for_ == grad_output.data()) {
    grad_input.swap(pending_input_grad_);
    pending_for_ = nullptr;
    return;
  }
  backprop(input, grad_output, false, grad_input);
}

}  // namespace fedcore::model
