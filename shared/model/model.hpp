// Model: a sequential network whose parameters live in one flat buffer.
//
// Construction walks the layers once: each layer's parameter tensors are appended to the
// ParamLayout as "<layer name>.<param>" (e.g. "conv1.weight"), one float buffer of
// layout.total() parameters and one of gradients are allocated, and each layer is bound
// to its slice. The walk asserts that the slices add up to the buffer exactly.
//
// `params()` and `grads()` are the spans that everything else works on: optimizers,
// FedAvg, serialization, clipping, allreduce. Writing into `params()` changes the model.
//
// Layers with non-trainable state (BatchNorm's running mean and variance) get a slice of a
// third buffer, `state()`, laid out by `state_layout()` the same way ("bn1.running_mean").
// It is empty for models without such layers. Training updates it in forward(); whoever
// ships a model to another process (checkpoints, broadcasts, federation) ships it too.
//
// Copying a model deep-copies layers and buffers and re-binds the copy's views to the
// copy's own buffers; moving keeps the heap buffers, so the views stay valid. Either way
// a model never aliases another's parameters.
//
// Thread safety: none. One model per thread; copy it to give another thread its own.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shared/model/layer.hpp"
#include "shared/model/layout.hpp"
#include "shared/util/aligned_vector.hpp"

namespace fedcore::model {

class Model {
 public:
  // REQUIRES: at least one layer; each layer's input shape equals the previous layer's
  // output shape (the first one's equals `input_shape`); layer names unique.
  Model(Shape input_shape, std::vector<std::unique_ptr<Layer>> layers);

  Model(const Model& other);
  Model& operator=(const Model& other);
  Model(Model&& other) noexcept = default;
  Model& operator=(Model&& other) noexcept = default;
  ~Model();

  const ParamLayout& layout() const noexcept { return layout_; }
  std::span<float> params() noexcept { return params_; }
  std::span<const float> params() const noexcept { return params_; }
  std::span<float> grads() noexcept { return grads_; }
  std::span<const float> grads() const noexcept { return grads_; }
  std::size_t param_count() const noexcept { return params_.size(); }
  const ParamLayout& state_layout() const noexcept { return state_layout_; }
  std::span<float> state() noexcept { return state_; }
  std::span<const float> state() const noexcept { return state_; }
  // For each entry of layout(), whether it is a normalisation layer's (ParamShape).
  const std::vector<bool>& normalization_entries() const noexcept { return normalization_; }

  const Shape& input_shape() const noexcept { return input_shape_; }
  const Shape& output_shape() const noexcept { return layers_.back()->output_shape(); }
  std::size_t input_size() const noexcept { return element_count(input_shape_); }
  std::size_t output_size() const noexcept { return element_count(output_shape()); }
  std::size_t layer_count() const noexcept { return layers_.size(); }
  const Layer& layer(std::size_t i) const { return *layers_[i]; }

  // Initialises every layer's parameters (and dropout streams) from `seed`.
  void initialize(std::uint64_t seed);

  // Runs the layers on a batch (one column per sample) and returns the output, which
  // stays valid until the next forward. The model keeps a pointer to `input` for
  // backward(): REQUIRES `input` outlive the matching backward() call.
  const Matrix& forward(const Matrix& input, Phase phase);

  // Back-propagates d loss / d output of the latest forward() and writes the parameter
  // gradients into grads() (overwriting). The first layer's input gradient is skipped
  // since nobody needs it.
  void backward(const Matrix& grad_output);

  // A multi-line table: layer, output shape, parameter count.
  std::string summary() const;

 private:
  void bind_all();

  Shape input_shape_;
  std::vector<std::unique_ptr<Layer>> layers_;
  ParamLayout layout_;
  ParamLayout state_layout_;
  std::vector<bool> normalization_;
  // 64-byte aligned, so every layer slice sits at the same alignment in every process.
  AlignedVector<float> params_;
  AlignedVector<float> grads_;
  AlignedVector<float> state_;
  // activations_[i] is layer i's output; input_ points at the caller's batch.
  std::vector<Matrix> activations_;
  const Matrix* input_ = nullptr;
  // input_grads_[i] is d loss / d (input of layer i). One buffer per layer, so every
  // buffer keeps its size from step to step and is never reallocated (two ping-pong
  // buffers would change size at every layer and page-fault fresh memory each step).
  std::vector<Matrix> input_grads_;
};

}  // namespace fedcore::model
