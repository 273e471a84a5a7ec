#include <algorithm>
#include <omp.h>

#include "shared/model/conv_wide.hpp"
#include "shared/model/gemm.hpp"
#include "shared/model/init.hpp"
#include "shared/model/layers.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {
namespace {

std::int64_t conv_out(std::int64_t in, const Conv2dOptions& o) {
  return (in + 2 * o.padding - o.kernel) / o.stride + 1;
}

}  // namespace

Conv2d::Conv2d(const Shape& input_shape, const Conv2dOptions& options)
    : Layer(input_shape, input_shape.size() == 3
                             ? Shape{conv_out(input_shape[0], options),
                                     conv_out(input_shape[1], options), options.out_channels}
                             : Shape{1}),
      options_(options) {
  FEDCORE_ASSERT(input_shape.size() == 3, "Conv2d needs an {H, W, C} input");
  FEDCORE_ASSERT(
      options.kernel > 0 && options.stride > 0 && options.padding >= 0 && options.out_channels > 0,
      "Conv2d: bad options");
  in_h_ = input_shape[0];
  in_w_ = input_shape[1];
  in_c_ = input_shape[2];
  FEDCORE_ASSERT(options.kernel <= in_h_ + 2 * options.padding &&
                     options.kernel <= in_w_ + 2 * options.padding,
                 "Conv2d: kernel larger than the padded input");
  out_h_ = output_shape()[0];
  out_w_ = output_shape()[1];
  patch_size_ = options.kernel * options.kernel * in_c_;
  const auto g = geometry();
  kernels_ = kernels::wide_applies(g)           ? ConvKernels::direct_wide
             : kernels::wide_forward_applies(g) ? ConvKernels::wide_forward
             : kernels::direct_applies(g)       ? ConvKernels::small_patch
                                                : ConvKernels::im2col_gemm;
}

Conv2d::Conv2d(const Conv2d& other)
    : Layer(other),
      in_h_(other.in_h_),
      in_w_(other.in_w_),
      in_c_(other.in_c_),
      out_h_(other.out_h_),
      out_w_(other.out_w_),
      options_(other.options_),
      patch_size_(other.patch_size_),
      kernels_(other.kernels_) {}

std::unique_ptr<Layer> Conv2d::clone() const {
  return std::unique_ptr<Layer>(new Conv2d(*this));
}

std::vector<ParamShape> Conv2d::param_shapes() const {
  const auto k = options_.kernel;
  std::vector<ParamShape> shapes{{"weight", {k, k, in_c_, options_.out_channels}}};
  if (options_.bias) {
    shapes.push_back({"bias", {options_.out_channels}});
  }
  return shapes;
}

void Conv2d::bind(std::span<float> params, std::span<float> grads) {
  const auto cout = options_.out_channels;
  const auto weights = static_cast<std::size_t>(patch_size_ * cout);
  const auto biases = options_.bias ? cout : 0;
  FEDCORE_ASSERT(
      params.size() == weights + static_cast<std::size_t>(biases) && grads.size() == params.size(),
      "Conv2d::bind: slice size mismatch");
  new (&weight_) MatrixMap(params.data(), cout, patch_size_);
  new (&bias_) VectorMap(params.data() + weights, biases);
  new (&weight_grad_) MatrixMap(grads.data(), cout, patch_size_);
  new (&bias_grad_) VectorMap(grads.data() + weights, biases);
}

void Conv2d::initialize(Rng& rng) {
  const double area = double(options_.kernel * options_.kernel);
  glorot_uniform({weight_.data(), static_cast<std::size_t>(weight_.size())}, area * double(in_c_),
                 area * double(options_.out_channels), rng);
  bias_.setZero();
}

// A column holds one receptive field in (ky, kx, c) order. The input is HWC, so for each
// kernel row the k * in_c values under the window are contiguous in the input and in the
// column: one copy per kernel row when the row lies inside the image; element-wise
// handling only where the window overlaps the zero padding.
void Conv2d::im2col(const Matrix& input, Eigen::Index first, Eigen::Index count,
                    Matrix& columns) const {
  const auto positions = out_h_ * out_w_;
  const auto k = options_.kernel;
  const auto row_floats = k * in_c_;
  columns.resize(column_rows(), positions * count);
  for (Eigen::Index b = 0; b < count; ++b) {
    const float* sample = input.col(first + b).data();
    for (std::int64_t oy = 0; oy < out_h_; ++oy) {
      for (std::int64_t ox = 0; ox < out_w_; ++ox) {
        float* column = columns.col(b * positions + oy * out_w_ + ox).data();
        if (options_.bias) {
          column[patch_size_] = 1.0f;
        }
        const std::int64_t x0 = ox * options_.stride - options_.padding;
        const bool row_inside = x0 >= 0 && x0 + k <= in_w_;
        for (std::int64_t ky = 0; ky < k; ++ky) {
          const std::int64_t iy = oy * options_.stride - options_.padding + ky;
          float* dst = column + ky * row_floats;
          if (iy < 0 || iy >= in_h_) {
            std::fill_n(dst, row_floats, 0.0f);
          } else if (row_inside) {
            std::copy_n(sample + (iy * in_w_ + x0) * in_c_, row_floats, dst);
          } else {
            for (std::int64_t kx = 0; kx < k; ++kx) {
              const std::int64_t ix = x0 + kx;
              if (ix < 0 || ix >= in_w_) {
                std::fill_n(dst + kx * in_c_, in_c_, 0.0f);
              } else {
                std::copy_n(sample + (iy * in_w_ + ix) * in_c_, in_c_, dst + kx * in_c_);
              }
            }
          }
        }
      }
    }
  }
}

// The adjoint of im2col: every column entry is added back to the input element it was
// copied from (overlapping windows accumulate), in the same contiguous kernel-row runs.
void Conv2d::col2im(const Matrix& columns, Eigen::Index first, Eigen::Index count,
                    Matrix& grad_input) const {
  const auto positions = out_h_ * out_w_;
  const auto k = options_.kernel;
  const auto row_floats = k * in_c_;
  for (Eigen::Index b = 0; b < count; ++b) {
    float* sample = grad_input.col(first + b).data();
    std::fill_n(sample, grad_input.rows(), 0.0f);
    for (std::int64_t oy = 0; oy < out_h_; ++oy) {
      for (std::int64_t ox = 0; ox < out_w_; ++ox) {
        const float* column = columns.col(b * positions + oy * out_w_ + ox).data();
        const std::int64_t x0 = ox * options_.stride - options_.padding;
        const std::int64_t kx_begin = std::max<std::int64_t>(0, -x0);
        const std::int64_t kx_end = std::min<std::int64_t>(k, in_w_ - x0);
        for (std::int64_t ky = 0; ky < k; ++ky) {
          const std::int64_t iy = oy * options_.stride - options_.padding + ky;
          if (iy < 0 || iy >= in_h_ || kx_begin >= kx_end) {
            continue;
          }
          const float* src = column + ky * row_floats + kx_begin * in_c_;
          float* dst = sample + (iy * in_w_ + x0 + kx_begin) * in_c_;
          const std::int64_t run = (kx_end - kx_begin) * in_c_;
          for (std::int64_t i = 0; i < run; ++i) {
            dst[i] += src[i];
          }
        }
      }
    }
  }
}

kernels::ConvGeometry Conv2d::geometry() const noexcept {
  return {in_h_,           in_w_,           in_c_,           out_h_, out_w_, options_.out_channels,
          options_.kernel, options_.stride, options_.padding};
}

Eigen::Index Conv2d::chunk_samples() const noexcept {
  const auto per_sample = static_cast<std::size_t>(column_rows() * out_h_ * out_w_) * sizeof(float);
  return static_cast<Eigen::Index>(
      std::clamp<std::size_t>(kConvChunkBytes / std::max<std::size_t>(per_sample, 1), 1, 256));
}

Conv2d::Chunks Conv2d::chunks_of(Eigen::Index batch) const noexcept {
  const auto largest = chunk_samples();
  Eigen::Index count = (batch + largest - 1) / largest;
  // A multiple of 4 once there are several: 2 or 4 threads then get equal shares (11 chunks
  // of 3 samples for a batch of 32 left one of 2 threads idle for a twelfth of the layer).
  // It depends on the batch only, never on the thread count, so neither do the results.
  if (count > 1) {
    count = std::min<Eigen::Index>(batch, (count + 3) / 4 * 4);
  }
  return {batch, count};
}
Matrix& Conv2d::scratch(int thread) {
  return scratch_[static_cast<std::size_t>(thread)];
}

namespace {

// Runs work(chunk) for every chunk: spread over the compute threads when there are at
// least as many chunks as threads (each chunk's GEMM then runs on its thread alone:
// OpenBLAS and Eigen run single-threaded inside a parallel region), else one after the
// other with the GEMMs using the threads.
template <class Work>
void for_each_chunk(Eigen::Index chunks, Work&& work) {
  const bool spread = chunks >= omp_get_max_threads() && omp_get_max_threads() > 1;
#pragma omp parallel for schedule(static) if (spread)
  for (Eigen::Index c = 0; c < chunks; ++c) {
    work(c, omp_get_thread_num());
  }
}

}  // namespace

void Conv2d::forward(const Matrix& input, Matrix& output, Phase) {
  FEDCORE_ASSERT(input.rows() == static_cast<Eigen::Index>(input_size()),
                 "Conv2d::forward: input rows differ from H*W*C");
  const auto batch = input.cols();
  const auto cout = options_.out_channels;
  const auto positions = out_h_ * out_w_;
  const auto chunks = chunks_of(batch);
  output.resize(static_cast<Eigen::Index>(output_size()), batch);
  scratch_.resize(static_cast<std::size_t>(omp_get_max_threads()));
  if (kernels_ != ConvKernels::im2col_gemm) {
    forward_direct(input, output);
    return;
  }
  for_each_chunk(chunks.count, [&](Eigen::Index c, int thread) {
    const auto first = chunks.first(c);
    const auto count = chunks.first(c + 1) - first;
    Matrix& columns = scratch(thread);
    im2col(input, first, count, columns);
    // The cout x (positions*count) product, laid out column by column, is exactly the HWC
    // output of each sample of the chunk in turn. [weights | bias] times the columns and
    // their row of ones adds the bias.
    gemm::multiply({weight_.data(), cout, column_rows()},
                   {columns.data(), column_rows(), positions * count}, output.col(first).data());
  });
}

void Conv2d::gradient(const Matrix& input, const Matrix& grad_output) {
  const auto batch = input.cols();
  const auto cout = options_.out_channels;
  const auto positions = out_h_ * out_w_;
  const auto chunks = chunks_of(batch);
  const Eigen::Map<const Matrix> dy(grad_output.data(), cout, positions * batch);
  scratch_.resize(static_cast<std::size_t>(omp_get_max_threads()));
  chunk_weight_grads_.resize(static_cast<std::size_t>(chunks.count));
  for_each_chunk(chunks.count, [&](Eigen::Index c, int thread) {
    const auto first = chunks.first(c);
    const auto count = chunks.first(c + 1) - first;
    if (kernels_ != ConvKernels::im2col_gemm) {
      gradient_direct(input, grad_output, first, count, thread,
                      chunk_weight_grads_[static_cast<std::size_t>(c)]);
      return;
    }
    Matrix& columns = scratch(thread);
    im2col(input, first, count, columns);
    // Against the row of ones, the product's last column sums dy: the bias gradient.
    auto& partial = chunk_weight_grads_[static_cast<std::size_t>(c)];
    partial.resize(cout, column_rows());
    gemm::multiply({dy.col(first * positions).data(), cout, positions * count},
                   {columns.data(), column_rows(), positions * count, true}, partial.data());
  });
  // The weight gradient and the bias gradient after it, as one cout x column_rows() matrix.
  MatrixMap grads(weight_grad_.data(), cout, column_rows());
  if (chunks.count == 0) {
    grads.setZero();
    return;
  }
  grads = chunk_weight_grads_[0];
  for (Eigen::Index c = 1; c < chunks.count; ++c) {
    grads += chunk_weight_grads_[static_cast<std::size_t>(c)];
  }
}

// Each sample on its own: zero-padded into the thread's scratch, then the direct kernel.
void Conv2d::forward_direct(const Matrix& input, Matrix& output) {
  const auto batch = input.cols();
  const bool spread = batch > 1 && omp_get_max_threads() > 1;
  const float* bias = options_.bias ? bias_.data() : nullptr;
  const kernels::ConvGeometry g = geometry();
#pragma omp parallel for schedule(static) if (spread)
  for (Eigen::Index b = 0; b < batch; ++b) {
    Matrix& padded = scratch(omp_get_thread_num());
    padded.resize(g.padded_size(), 1);
    kernels::pad_sample(input.col(b).data(), padded.data(), g);
    if (forward_is_wide()) {
      kernels::conv_wide_forward(padded.data(), weight_.data(), bias, output.col(b).data(), g);
    } else {
      kernels::conv_direct_forward(padded.data(), weight_.data(), bias, output.col(b).data(), g);
    }
  }
}

// The chunk's samples in order into one partial [weights | bias] gradient, as the product
// would give it.
void Conv2d::gradient_direct(const Matrix& input, const Matrix& grad_output, Eigen::Index first,
                             Eigen::Index count, int thread, Matrix& partial) {
  const auto cout = options_.out_channels;
  partial.setZero(cout, column_rows());
  float* bias_grad = options_.bias ? partial.data() + patch_size_ * cout : nullptr;
  const kernels::ConvGeometry g = geometry();
  Matrix& padded = scratch(thread);
  padded.resize(g.padded_size(), 1);
  for (Eigen::Index b = first; b < first + count; ++b) {
    kernels::pad_sample(input.col(b).data(), padded.data(), g);
    if (forward_is_wide()) {
      kernels::conv_wide_weight_gradient(padded.data(), grad_output.col(b).data(), partial.data(),
                                         bias_grad, g);
    } else {
      kernels::conv_direct_weight_gradient(padded.data(), grad_output.col(b).data(), partial.data(),
                                           bias_grad, g);
    }
  }
}

void Conv2d::backward(const Matrix& input, const Matrix&, const Matrix& grad_output,
                      Matrix& grad_input) {
  const auto batch = input.cols();
  const auto cout = options_.out_channels;
  const auto positions = out_h_ * out_w_;
  const auto chunks = chunks_of(batch);
  const Eigen::Map<const Matrix> dy(grad_output.data(), cout, positions * batch);
  grad_input.resize(input.rows(), batch);
  scratch_.resize(static_cast<std::size_t>(omp_get_max_threads()));
  if (kernels_ == ConvKernels::direct_wide) {
    backward_wide(grad_output, grad_input);
    return;
  }
  for_each_chunk(chunks.count, [&](Eigen::Index c, int thread) {
    const auto first = chunks.first(c);
    const auto count = chunks.first(c + 1) - first;
    Matrix& grad_columns = scratch(thread);
    grad_columns.resize(patch_size_, positions * count);
    gemm::multiply({weight_.data(), cout, patch_size_, true},
                   {dy.col(first * positions).data(), cout, positions * count},
                   grad_columns.data());
    col2im(grad_columns, first, count, grad_input);
  });
}

// Each sample's dy zero-padded into the thread's scratch, then the forward loops with the
// flipped weights (packed once per call: they change every step).
void Conv2d::backward_wide(const Matrix& grad_output, Matrix& grad_input) {
  const auto batch = grad_output.cols();
  const kernels::ConvGeometry g = geometry();
  const kernels::ConvGeometry back = kernels::input_gradient_geometry(g);
  flipped_weights_.resize(patch_size_ * options_.out_channels, 1);
  kernels::pack_flipped_weights(weight_.data(), flipped_weights_.data(), g);
  const bool spread = batch > 1 && omp_get_max_threads() > 1;
#pragma omp parallel for schedule(static) if (spread)
  for (Eigen::Index b = 0; b < batch; ++b) {
    Matrix& padded = scratch(omp_get_thread_num());
    padded.resize(back.padded_size(), 1);
    kernels::pad_sample(grad_output.col(b).data(), padded.data(), back);
    kernels::conv_wide_input_gradient(padded.data(), flipped_weights_.data(),
                                      grad_input.col(b).data(), g);
  }
}

}  // namespace fedcore::model
