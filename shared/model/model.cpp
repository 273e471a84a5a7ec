#include "shared/model/model.hpp"

#include <cstdio>

#include "shared/util/assert.hpp"

namespace fedcore::model {

Model::Model(Shape input_shape, std::vector<std::unique_ptr<Layer>> layers)
    : input_shape_(std::move(input_shape)), layers_(std::move(layers)) {
  FEDCORE_ASSERT(!layers_.empty(), "a model needs at least one layer");
  const Shape* previous = &input_shape_;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    auto& layer = *layers_[i];
    FEDCORE_ASSERT(layer.input_shape() == *previous,
                   "layer input shape differs from the previous output");
    if (layer.name().empty()) {
      layer.set_name(std::string(layer.kind()) + std::to_string(i));
    }
    for (const auto& p : layer.param_shapes()) {
      layout_.append(layer.name() + "." + p.name, p.shape);
      normalization_.push_back(p.normalization);
    }
    for (const auto& p : layer.state_shapes()) {
      state_layout_.append(layer.name() + "." + p.name, p.shape);
    }
    previous = &layer.output_shape();
  }
  params_.assign(layout_.total(), 0.0f);
  grads_.assign(layout_.total(), 0.0f);
  state_.assign(state_layout_.total(), 0.0f);
  activations_.resize(layers_.size());
  input_grads_.resize(layers_.size());
  bind_all();
}

Model::Model(const Model& other)
    : input_shape_(other.input_shape_),
      layout_(other.layout_),
      state_layout_(other.state_layout_),
      normalization_(other.normalization_),
      params_(other.params_),
      grads_(other.grads_),
      state_(other.state_),
      activations_(other.layers_.size()),
      input_grads_(other.layers_.size()) {
  layers_.reserve(other.layers_.size());
  for (const auto& layer : other.layers_) {
    layers_.push_back(layer->clone());
  }
  bind_all();
}

Model& Model::operator=(const Model& other) {
  if (this != &other) {
    Model copy(other);
    *this = std::move(copy);
  }
  return *this;
}

Model::~Model() = default;

// One walk hands every layer its slice; the slices must tile the buffer exactly.
void Model::bind_all() {
  std::size_t offset = 0;
  const auto& entries = layout_.entries();
  std::size_t entry = 0;
  for (auto& layer : layers_) {
    std::size_t size = 0;
    for (std::size_t n = layer->param_shapes().size(); n > 0; --n, ++entry) {
      FEDCORE_ASSERT(entries[entry].offset == offset + size, "layout offsets out of order");
      size += entries[entry].size;
    }
    layer->bind(std::span<float>(params_).subspan(offset, size),
                std::span<float>(grads_).subspan(offset, size));
    offset += size;
  }
  FEDCORE_ASSERT(offset == params_.size() && entry == entries.size(),
                 "layer slices do not add up to the parameter buffer");
  std::size_t state_offset = 0;
  for (auto& layer : layers_) {
    std::size_t size = 0;
    for (const auto& s : layer->state_shapes()) {
      size += element_count(s.shape);
    }
    layer->bind_state(std::span<float>(state_).subspan(state_offset, size));
    state_offset += size;
  }
  FEDCORE_ASSERT(state_offset == state_.size(), "layer state slices do not add up to the state");
}

void Model::initialize(std::uint64_t seed) {
  Rng rng(seed);
  for (auto& layer : layers_) {
    Rng layer_rng = rng.split();
    layer->initialize(layer_rng);
  }
}

const Matrix& Model::forward(const Matrix& input, Phase phase) {
  FEDCORE_ASSERT(input.rows() == static_cast<Eigen::Index>(input_size()),
                 "Model::forward: input rows differ from the model's input size");
  input_ = &input;
  const Matrix* x = &input;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->forward(*x, activations_[i], phase);
    x = &activations_[i];
  }
  return *x;
}

void Model::backward(const Matrix& grad_output) {
  FEDCORE_ASSERT(input_ != nullptr, "Model::backward before forward");
  const Matrix* dy = &grad_output;
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const Matrix& x = i == 0 ? *input_ : activations_[i - 1];
    layers_[i]->gradient(x, *dy);
    if (i == 0) {
      break;
    }
    layers_[i]->backward(x, activations_[i], *dy, input_grads_[i]);
    dy = &input_grads_[i];
  }
}

std::string Model::summary() const {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%-14s %-10s %-18s %12s\n", "layer", "kind", "output", "params");
  out += line;
  for (const auto& layer : layers_) {
    std::size_t count = 0;
    for (const auto& p : layer->param_shapes()) {
      count += element_count(p.shape);
    }
    std::snprintf(line, sizeof line, "%-14s %-10s %-18s %12zu\n", layer->name().c_str(),
                  std::string(layer->kind()).c_str(),
                  shape_to_string(layer->output_shape()).c_str(), count);
    out += line;
  }
  std::snprintf(line, sizeof line, "total parameters: %zu (fingerprint %s)\n", layout_.total(),
                layout_.fingerprint_hex().c_str());
  return out + line;
}

}  // namespace fedcore::model
