// Layer: one step of a sequential network, in the flat-parameter design.
//
// Activations are column-major float matrices with one column per sample. A sample's
// per-layer shape (`input_shape()`/`output_shape()`) says how to read a column: images
// are HWC (height, width, channels, channels fastest), so a convolution's GEMM output
// already is the next layer's input with no reordering.
//
// A layer never owns its parameters. The Model walks its layers once, hands each one a
// slice of the model's flat parameter buffer and the same slice of the gradient buffer
// (`bind`), and the layer seats `Eigen::Map` views on them. After a model is copied the
// copy re-binds the clone's views to its own buffers.
//
// The three computations are separate and separately tested (docs/engineering.md, habit 10):
//  - forward:  output = f(input)
//  - backward: grad_input = (d output / d input)^T grad_output
//  - gradient: d loss / d params, written (not accumulated) into the bound gradient slice
// `backward` and `gradient` use the input and output of the latest `forward` call (layers
// may cache intermediate results of that call, e.g. im2col columns or max indices).
//
// Non-trainable state (BatchNorm's running statistics) lives in a second flat buffer of the
// model, laid out the same way (`state_shapes`, `bind_state`): it checkpoints and broadcasts
// with the parameters but no optimizer, gradient or clipping ever touches it. A layer with
// state updates it in `forward` during training and reads it in evaluation.
//
// Thread safety: none; a layer belongs to one model used by one thread.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/model/layout.hpp"
#include "shared/util/eigen.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::model {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
using MatrixMap = Eigen::Map<Matrix>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;

// Dropout and similar layers act only in training.
enum class Phase { train, eval };

struct ParamShape {
  std::string name;  // local name, e.g. "weight"
  Shape shape;
  // A normalisation layer's own parameters (BatchNorm's weight and bias): what FedBN keeps
  // at each site with the running statistics (shared/model/federated_vector.hpp).
  bool normalization = false;
};

class Layer {
 public:
  virtual ~Layer() = default;

  // A deep copy, unbound: the new owner must call bind().
  virtual std::unique_ptr<Layer> clone() const = 0;
  // "dense", "conv2d", ...
  virtual std::string_view kind() const = 0;

  const std::string& name() const noexcept { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  const Shape& input_shape() const noexcept { return input_shape_; }
  const Shape& output_shape() const noexcept { return output_shape_; }
  std::size_t input_size() const noexcept { return element_count(input_shape_); }
  std::size_t output_size() const noexcept { return element_count(output_shape_); }

  // Parameter tensors in the order they occupy the layer's slice. Empty for
  // parameter-free layers.
  virtual std::vector<ParamShape> param_shapes() const { return {}; }
  // Seats the views. REQUIRES: both spans have the total size of param_shapes().
  virtual void bind(std::span<float> /*params*/, std::span<float> /*grads*/) {}
  // Non-trainable state tensors, in the order they occupy the layer's state slice.
  virtual std::vector<ParamShape> state_shapes() const { return {}; }
  // Seats the state views. REQUIRES: the span has the total size of state_shapes().
  virtual void bind_state(std::span<float> /*state*/) {}
  // When false, training forwards leave the state alone (they still normalise with the
  // batch): for a forward that must not count twice, such as a pipeline stage's
  // recomputation of a micro-batch it already ran. Default true.
  virtual void set_track_state(bool /*track*/) {}
  // Writes initial values into the bound parameters (and state).
  virtual void initialize(Rng& /*rng*/) {}

  virtual void forward(const Matrix& input, Matrix& output, Phase phase) = 0;
  virtual void backward(const Matrix& input, const Matrix& output, const Matrix& grad_output,
                        Matrix& grad_input) = 0;
  virtual void gradient(const Matrix& /*input*/, const Matrix& /*grad_output*/) {}

 protected:
  Layer(Shape input_shape, Shape output_shape)
      : input_shape_(std::move(input_shape)), output_shape_(std::move(output_shape)) {}
  Layer(const Layer&) = default;
  Layer& operator=(const Layer&) = delete;
  // For a layer made of layers, whose output shape is known once its parts are built.
  void set_output_shape(Shape shape) { output_shape_ = std::move(shape); }

 private:
  std::string name_;
  Shape input_shape_;
  Shape output_shape_;
};

}  // namespace fedcore::model
