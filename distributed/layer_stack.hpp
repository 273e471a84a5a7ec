// LayerStack: a run of consecutive layers of a model — all of them for a data-parallel
// replica, a slice of them for a pipeline stage — with their own flat parameter and
// gradient buffers, laid out exactly as the model lays out those layers' parameters.
//
// It differs from model::Model in two ways the datacenter jobs need:
//   - backward can produce the gradient with respect to the stack's input (a pipeline
//     stage sends it to the previous stage);
//   - backward calls a hook as soon as each layer's parameter gradients are final, so a
//     data-parallel job can start allreducing them while earlier layers still compute.
//
// Non-trainable state (BatchNorm's running statistics) gets the same treatment in a third
// buffer, `state()`, laid out as the model's state_layout() lays out those layers' state.
//
// Thread safety: none; one stack per thread. The hook runs on the calling thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "shared/model/model.hpp"
#include "shared/util/aligned_vector.hpp"

namespace fedcore::distributed {

using model::Matrix;

// Where layers [first, last) of a model keep their parameters and state inside the
// model's two flat buffers.
struct LayerSlice {
  std::size_t param_offset = 0, param_size = 0, state_offset = 0, state_size = 0;
};
LayerSlice slice_of(const model::Model& model, std::size_t first, std::size_t last);

class LayerStack {
 public:
  // Clones layers [first, last) of `model` and copies their current parameters and state.
  // REQUIRES: first < last <= model.layer_count().
  LayerStack(const model::Model& model, std::size_t first, std::size_t last);
  LayerStack(const LayerStack&) = delete;
  LayerStack& operator=(const LayerStack&) = delete;

  std::span<float> params() noexcept { return params_; }
  std::span<const float> params() const noexcept { return params_; }
  std::span<float> grads() noexcept { return grads_; }
  // Where this stack's parameters start inside the whole model's flat buffer.
  std::size_t model_offset() const noexcept { return model_offset_; }
  std::span<float> state() noexcept { return state_; }
  std::span<const float> state() const noexcept { return state_; }
  // Where this stack's state starts inside the whole model's state buffer.
  std::size_t model_state_offset() const noexcept { return model_state_offset_; }
  std::size_t layer_count() const noexcept { return layers_.size(); }
  // Element range of layer i's parameters inside params() (size 0 for parameter-free layers).
  std::size_t layer_param_begin(std::size_t i) const noexcept { return offsets_[i]; }
  std::size_t layer_param_size(std::size_t i) const noexcept {
    return offsets_[i + 1] - offsets_[i];
  }
  std::size_t input_size() const noexcept;
  std::size_t output_size() const noexcept;

  // Runs the layers on a batch (one column per sample). The stack keeps a pointer to
  // `input` for backward: REQUIRES it outlive the matching backward. The output stays
  // valid until the next forward. `track_state` false: a training forward that leaves the
  // running statistics alone (a recomputation of a batch already counted).
  const Matrix& forward(const Matrix& input, model::Phase phase, bool track_state = true);

  // Back-propagates d loss / d output of the latest forward: overwrites grads(), calls
  // `layer_done(i)` right after layer i's parameter gradients are final (last layer
  // first), and writes d loss / d input into `grad_input` when it is non-null.
  void backward(const Matrix& grad_output, Matrix* grad_input,
                const std::function<void(std::size_t)>& layer_done = {});

 private:
  std::vector<std::unique_ptr<model::Layer>> layers_;
  std::vector<std::size_t> offsets_;  // layers_.size() + 1 entries
  std::size_t model_offset_ = 0;
  std::size_t model_state_offset_ = 0;
  bool tracking_state_ = true;
  // 64-byte aligned, like model::Model's buffers: with malloc's alignment the vectorised
  // loops over them (optimizer steps, reductions) rounded differently from one process,
  // or one run, to the next, and a resumed job was not bit-identical to a straight one.
  AlignedVector<float> params_;
  AlignedVector<float> grads_;
  AlignedVector<float> state_;
  std::vector<Matrix> activations_;
  std::vector<Matrix> input_grads_;
  const Matrix* input_ = nullptr;
};

}  // namespace fedcore::distributed
