#include "distributed/layer_stack.hpp"

#include <algorithm>

#include "shared/util/assert.hpp"

namespace fedcore::distributed {
namespace {

std::size_t param_count(const model::Layer& layer) {
  std::size_t n = 0;
  for (const auto& p : layer.param_shapes())
    n += model::element_count(p.shape);
  return n;
}

std::size_t state_count(const model::Layer& layer) {
  std::size_t n = 0;
  for (const auto& p : layer.state_shapes())
    n += model::element_count(p.shape);
  return n;
}

}  // namespace

LayerSlice slice_of(const model::Model& model, std::size_t first, std::size_t last) {
  LayerSlice slice;
  for (std::size_t i = 0; i < last; ++i) {
    (i < first ? slice.param_offset : slice.param_size) += param_count(model.layer(i));
    (i < first ? slice.state_offset : slice.state_size) += state_count(model.layer(i));
  }
  return slice;
}

LayerStack::LayerStack(const model::Model& model, std::size_t first, std::size_t last) {
  FEDCORE_ASSERT(first < last && last <= model.layer_count(), "bad layer range");
  const LayerSlice slice = slice_of(model, first, last);
  model_offset_ = slice.param_offset;
  model_state_offset_ = slice.state_offset;
  offsets_.push_back(0);
  std::vector<std::size_t> state_offsets{0};
  for (std::size_t i = first; i < last; ++i) {
    layers_.push_back(model.layer(i).clone());
    offsets_.push_back(offsets_.back() + param_count(*layers_.back()));
    state_offsets.push_back(state_offsets.back() + state_count(*layers_.back()));
  }
  const auto state_source = model.state().subspan(model_state_offset_, state_offsets.back());
  state_.assign(state_source.begin(), state_source.end());
  const auto source = model.params().subspan(model_offset_, offsets_.back());
  params_.assign(source.begin(), source.end());
  grads_.assign(params_.size(), 0.0f);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const std::size_t n = offsets_[i + 1] - offsets_[i];
    layers_[i]->bind(std::span<float>(params_).subspan(offsets_[i], n),
                     std::span<float>(grads_).subspan(offsets_[i], n));
    layers_[i]->bind_state(std::span<float>(state_).subspan(
        state_offsets[i], state_offsets[i + 1] - state_offsets[i]));
  }
  activations_.resize(layers_.size());
  input_grads_.resize(layers_.size());
}

std::size_t LayerStack::input_size() const noexcept {
  return layers_.front()->input_size();
}
std::size_t LayerStack::output_size() const noexcept {
  return layers_.back()->output_size();
}

const Matrix& LayerStack::forward(const Matrix& input, model::Phase phase, bool track_state) {
  FEDCORE_ASSERT(static_cast<std::size_t>(input.rows()) == input_size(),
                 "LayerStack::forward: input rows differ from the stack's input size");
  if (track_state != tracking_state_) {
    for (auto& layer : layers_)
      layer->set_track_state(track_state);
    tracking_state_ = track_state;
  }
  input_ = &input;
  const Matrix* x = &input;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->forward(*x, activations_[i], phase);
    x = &activations_[i];
  }
  return *x;
}

void LayerStack::backward(const Matrix& grad_output, Matrix* grad_input,
                          const std::function<void(std::size_t)>& layer_done) {
  FEDCORE_ASSERT(input_ != nullptr, "LayerStack::backward before forward");
  const Matrix* dy = &grad_output;
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const Matrix& x = i == 0 ? *input_ : activations_[i - 1];
    layers_[i]->gradient(x, *dy);
    if (layer_done)
      layer_done(i);
    if (i == 0 && grad_input == nullptr)
      break;
    Matrix& dx = i == 0 ? *grad_input : input_grads_[i];
    layers_[i]->backward(x, activations_[i], *dy, dx);
    dy = &input_grads_[i];
  }
}

}  // namespace fedcore::distributed
