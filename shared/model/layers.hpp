// The layer zoo: Dense, Conv2d, MaxPool2d, ReLU, Flatten, Dropout.
//
// Constructors take the per-sample input shape and derive the output shape; a shape that
// cannot work (a kernel larger than the padded input, ...) is a programmer error here,
// because model specs are validated before layers are built (model/spec.hpp).
//
// Parameter layout, row-major (see layout.hpp):
//   Dense   weight {in, out}              bias {out}
//   Conv2d  weight {kh, kw, cin, cout}    bias {cout} unless options.bias is false (HWIO)
// Initialisation: Glorot-uniform weights, zero biases.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shared/model/conv_direct.hpp"
#include "shared/model/layer.hpp"

namespace fedcore::model {

// y = W x + b on flattened inputs.
class Dense final : public Layer {
 public:
  Dense(const Shape& input_shape, std::int64_t units);

  std::unique_ptr<Layer> clone() const override;
  std::string_view kind() const override { return "dense"; }
  std::vector<ParamShape> param_shapes() const override;
  void bind(std::span<float> params, std::span<float> grads) override;
  void initialize(Rng& rng) override;
  void forward(const Matrix& input, Matrix& output, Phase phase) override;
  void backward(const Matrix& input, const Matrix& output, const Matrix& grad_output,
                Matrix& grad_input) override;
  void gradient(const Matrix& input, const Matrix& grad_output) override;

 private:
  Dense(const Dense& other);

  std::int64_t in_;
  std::int64_t out_;
  // Memory of the {in, out} row-major weight is an out x in column-major matrix.
  MatrixMap weight_{nullptr, 0, 0};
  VectorMap bias_{nullptr, 0};
  MatrixMap weight_grad_{nullptr, 0, 0};
  VectorMap bias_grad_{nullptr, 0};
};

struct Conv2dOptions {
  std::int64_t out_channels = 1;
  std::int64_t kernel = 3;  // square kernel
  std::int64_t stride = 1;
  std::int64_t padding = 0;  // zero padding on each side
  bool bias = true;          // false before a BatchNorm, which makes a bias redundant
};

// 2-D convolution over HWC inputs, by im2col and GEMM over chunks of the batch.
//
// A chunk is as many samples as make about kConvChunkBytes of im2col columns, so that the
// columns are written, multiplied and read back while they are still in the core's cache:
// one GEMM over a whole batch of 128 Fashion-MNIST samples made 80 MB of columns for the
// second convolution, and the step spent more time moving them through memory (im2col, the
// GEMM's packing, col2im) than multiplying. The weight gradient re-gathers each chunk's
// columns from the input rather than keeping them. With several compute threads and at
// least as many chunks, the chunks are shared out among the threads (each GEMM then runs
// on one thread, on data in its own cache); with fewer chunks the GEMMs use the threads.
// Each chunk's weight gradient is summed in chunk order, so results do not depend on the
// thread count. With a bias, each column ends in a 1 and the bias is the weight matrix's
// last column (it follows the weights in the parameter memory), so the forward product
// adds it and the weight gradient's product sums it, with no pass of their own.
//
// A layer with a small receptive field (k * k * cin <= kernels::kDirectPatchMax, the first
// layer of an image model) computes its forward pass and weight gradient directly instead
// (model/conv_direct.hpp): there im2col's columns are 25 floats tall, too short for a GEMM.
// Its input gradient still goes through the product and col2im. On an AVX-512 CPU a layer
// whose output channels are a multiple of 16 computes its forward pass and weight gradient
// on the wide kernels instead (model/conv_wide.hpp), and its input gradient too at stride 1
// when its input channels are (the cnn's second layer): no im2col and col2im at all.
inline constexpr std::size_t kConvChunkBytes = std::size_t{2} << 20;

// Which code computes a Conv2d's passes; chosen once, from the geometry and the CPU.
enum class ConvKernels {
  im2col_gemm,   // columns and products, every pass
  small_patch,   // forward and weight gradient by kernels::conv_direct_*; input gradient by product
  wide_forward,  // forward and weight gradient by kernels::conv_wide_*; input gradient by product
  direct_wide,   // every pass by kernels::conv_wide_*
};

class Conv2d final : public Layer {
 public:
  // REQUIRES: input_shape is {H, W, C}, kernel <= H + 2 padding and W + 2 padding.
  Conv2d(const Shape& input_shape, const Conv2dOptions& options);

  std::unique_ptr<Layer> clone() const override;
  std::string_view kind() const override { return "conv2d"; }
  std::vector<ParamShape> param_shapes() const override;
  void bind(std::span<float> params, std::span<float> grads) override;
  void initialize(Rng& rng) override;
  void forward(const Matrix& input, Matrix& output, Phase phase) override;
  void backward(const Matrix& input, const Matrix& output, const Matrix& grad_output,
                Matrix& grad_input) override;
  void gradient(const Matrix& input, const Matrix& grad_output) override;
  // The code this layer's passes run on (this geometry on this CPU).
  ConvKernels kernels() const noexcept { return kernels_; }

 private:
  Conv2d(const Conv2d& other);
  // Samples [first, first + count) of `input` as columns (patch_size x positions*count),
  // each followed by a 1 when the layer has a bias (column_rows()).
  void im2col(const Matrix& input, Eigen::Index first, Eigen::Index count, Matrix& columns) const;
  // The adjoint: adds `columns` into samples [first, first + count) of `grad_input`.
  void col2im(const Matrix& columns, Eigen::Index first, Eigen::Index count,
              Matrix& grad_input) const;
  // The direct paths' forward pass, and their weight gradient of samples
  // [first, first + count) into `partial` (cout x column_rows()).
  void forward_direct(const Matrix& input, Matrix& output);
  void gradient_direct(const Matrix& input, const Matrix& grad_output, Eigen::Index first,
                       Eigen::Index count, int thread, Matrix& partial);
  // The wide path's input gradient, sample by sample.
  void backward_wide(const Matrix& grad_output, Matrix& grad_input);
  // The shape the direct kernels take.
  kernels::ConvGeometry geometry() const noexcept;
  // Whether forward and weight gradient run on the wide kernels (model/conv_wide.hpp).
  bool forward_is_wide() const noexcept {
    return kernels_ == ConvKernels::direct_wide || kernels_ == ConvKernels::wide_forward;
  }
  // The rows of im2col's columns: the patch, then a 1 for the bias if there is one.
  std::int64_t column_rows() const noexcept { return patch_size_ + (options_.bias ? 1 : 0); }
  // The most samples a chunk holds (kConvChunkBytes of columns, at least 1).
  Eigen::Index chunk_samples() const noexcept;
  // A batch cut into `count` chunks of near-equal size: chunk c is samples
  // [first(c), first(c + 1)).
  struct Chunks {
    Eigen::Index batch = 0;
    Eigen::Index count = 0;
    Eigen::Index first(Eigen::Index c) const noexcept { return c * batch / count; }
  };
  Chunks chunks_of(Eigen::Index batch) const noexcept;
  // One columns buffer per compute thread.
  Matrix& scratch(int thread);

  std::int64_t in_h_, in_w_, in_c_;
  std::int64_t out_h_, out_w_;
  Conv2dOptions options_;
  std::int64_t patch_size_;  // kernel * kernel * in_c
  ConvKernels kernels_ = ConvKernels::im2col_gemm;
  // Weight memory is a cout x (kh*kw*cin) column-major matrix: HWIO row-major.
  MatrixMap weight_{nullptr, 0, 0};
  VectorMap bias_{nullptr, 0};
  MatrixMap weight_grad_{nullptr, 0, 0};
  VectorMap bias_grad_{nullptr, 0};
  std::vector<Matrix> scratch_;
  std::vector<Matrix> chunk_weight_grads_;  // one per chunk, summed in chunk order
  Matrix flipped_weights_;                  // the wide path's input-gradient weights
};

// Max pooling over HWC inputs. Output size floor((H - kernel) / stride) + 1, as in
// PyTorch: a window that would run past the edge is not computed.
class MaxPool2d final : public Layer {
 public:
  // stride 0 means stride = kernel. REQUIRES: input_shape is {H, W, C}, kernel <= H, W.
  MaxPool2d(const Shape& input_shape, std::int64_t kernel, std::int64_t stride = 0);

  std::unique_ptr<Layer> clone() const override;
  std::string_view kind() const override { return "maxpool2d"; }
  void forward(const Matrix& input, Matrix& output, Phase phase) override;
  void backward(const Matrix& input, const Matrix& output, const Matrix& grad_output,
                Matrix& grad_input) override;

 private:
  std::int64_t in_h_, in_w_, c_, out_h_, out_w_, kernel_, stride_;
  // For every output element, the index (within its sample's column) of the input that won.
  std::vector<std::int32_t> argmax_;
};

class ReLU final : public Layer {
 public:
  explicit ReLU(const Shape& input_shape) : Layer(input_shape, input_shape) {}
  std::unique_ptr<Layer> clone() const override;
  std::string_view kind() const override { return "relu"; }
  void forward(const Matrix& input, Matrix& output, Phase phase) override;
  void backward(const Matrix& input, const Matrix& output, const Matrix& grad_output,
                Matrix& grad_input) override;
};

// Changes only the declared shape: a column already is the flattened sample.
class Flatten final : public Layer {
 public:
  explicit Flatten(const Shape& input_shape);
  std::unique_ptr<Layer> clone() const override;
  std::string_view kind() const override { return "flatten"; }
  void forward(const Matrix& input, Matrix& output, Phase phase) override;
  void backward(const Matrix& input, const Matrix& output, const Matrix& grad_output,
                Matrix& grad_input) override;
};

// Inverted dropout: in training, zeroes each element with probability `rate` and scales
// the rest by 1 / (1 - rate); identity in evaluation. Its mask stream is seeded by
// initialize(), so training is reproducible.
class Dropout final : public Layer {
 public:
  // REQUIRES: 0 <= rate < 1.
  Dropout(const Shape& input_shape, float rate);
  std::unique_ptr<Layer> clone() const override;
  std::string_view kind() const override { return "dropout"; }
  void initialize(Rng& rng) override;
  void forward(const Matrix& input, Matrix& output, Phase phase) override;
  void backward(const Matrix& input, const Matrix& output, const Matrix& grad_output,
                Matrix& grad_input) override;
  float rate() const noexcept { return rate_; }

 private:
  float rate_;
  Rng rng_{0};
  Matrix mask_;  // 0 or 1/(1-rate) per element of the last training forward
  bool masked_ = false;
};

}  // namespace fedcore::model
