#include <algorithm>
#include <cmath>

#include "shared/model/mobile_layers.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {

namespace {

// Samples per chunk of the weight gradient: fixed, so the sum's order does not depend on
// the thread count.
constexpr Eigen::Index kGradientChunk = 8;

std::int64_t output_extent(std::int64_t in, const DepthwiseOptions& o) {
  return (in + 2 * o.padding - o.kernel) / o.stride + 1;
}

// Calls visit(tap, input_pixel) for every kernel tap of output pixel (oy, ox) that lands
// inside the in_h x in_w image: the one walk forward, backward and gradient share.
template <class Visit>
void for_each_tap(std::int64_t oy, std::int64_t ox, std::int64_t in_h, std::int64_t in_w,
                  const DepthwiseOptions& o, Visit&& visit) {
  for (std::int64_t ky = 0; ky < o.kernel; ++ky) {
    const std::int64_t iy = oy * o.stride - o.padding + ky;
    if (iy < 0 || iy >= in_h) {
      continue;
    }
    for (std::int64_t kx = 0; kx < o.kernel; ++kx) {
      const std::int64_t ix = ox * o.stride - o.padding + kx;
      if (ix >= 0 && ix < in_w) {
        visit(ky * o.kernel + kx, iy * in_w + ix);
      }
    }
  }
}

}  // namespace

DepthwiseConv2d::DepthwiseConv2d(const Shape& input_shape, const DepthwiseOptions& options)
    : Layer(input_shape, input_shape.size() == 3
                             ? Shape{output_extent(input_shape[0], options),
                                     output_extent(input_shape[1], options), input_shape[2]}
                             : Shape{}),
      in_h_(input_shape.size() == 3 ? input_shape[0] : 0),
      in_w_(input_shape.size() == 3 ? input_shape[1] : 0),
      c_(input_shape.size() == 3 ? input_shape[2] : 0),
      out_h_(output_shape().empty() ? 0 : output_shape()[0]),
      out_w_(output_shape().empty() ? 0 : output_shape()[1]),
      options_(options) {
  FEDCORE_ASSERT(input_shape.size() == 3 && c_ >= 1, "DepthwiseConv2d needs an {H, W, C} input");
  FEDCORE_ASSERT(options.kernel >= 1 && options.stride >= 1 && options.padding >= 0 &&
                     options.kernel <= in_h_ + 2 * options.padding &&
                     options.kernel <= in_w_ + 2 * options.padding,
                 "DepthwiseConv2d: kernel does not fit the padded input");
}

DepthwiseConv2d::DepthwiseConv2d(const DepthwiseConv2d& other)
    : Layer(other),
      in_h_(other.in_h_),
      in_w_(other.in_w_),
      c_(other.c_),
      out_h_(other.out_h_),
      out_w_(other.out_w_),
      options_(other.options_) {}

std::unique_ptr<Layer> DepthwiseConv2d::clone() const {
  return std::unique_ptr<Layer>(new DepthwiseConv2d(*this));
}

std::vector<ParamShape> DepthwiseConv2d::param_shapes() const {
  std::vector<ParamShape> shapes{{"weight", {options_.kernel, options_.kernel, c_}}};
  if (options_.bias) {
    shapes.push_back({"bias", {c_}});
  }
  return shapes;
}

void DepthwiseConv2d::bind(std::span<float> params, std::span<float> grads) {
  const auto weights = static_cast<std::size_t>(options_.kernel * options_.kernel * c_);
  const auto biases = options_.bias ? static_cast<std::size_t>(c_) : 0;
  FEDCORE_ASSERT(params.size() == weights + biases && grads.size() == params.size(),
                 "DepthwiseConv2d::bind: slice size mismatch");
  weight_ = params.first(weights);
  weight_grad_ = grads.first(weights);
  bias_ = params.subspan(weights);
  bias_grad_ = grads.subspan(weights);
}

// He-normal with fan_out = k^2 (one output channel per filter), as torchvision.
void DepthwiseConv2d::initialize(Rng& rng) {
  const float stddev =
      static_cast<float>(std::sqrt(2.0 / double(options_.kernel * options_.kernel)));
  for (float& w : weight_) {
    w = stddev * static_cast<float>(rng.normal());
  }
  std::fill(bias_.begin(), bias_.end(), 0.0f);
}

// For each output pixel, the kernel taps that land inside the image; each tap is one
// multiply-add over the pixel's C contiguous channels.
void DepthwiseConv2d::forward(const Matrix& input, Matrix& output, Phase) {
  FEDCORE_ASSERT(input.rows() == static_cast<Eigen::Index>(input_size()),
                 "DepthwiseConv2d::forward: input rows differ from the layer's input size");
  const Eigen::Index batch = input.cols();
  output.resize(static_cast<Eigen::Index>(output_size()), batch);
  const std::int64_t c = c_;
  const float* w = weight_.data();
  const float* b = options_.bias ? bias_.data() : nullptr;
#pragma omp parallel for schedule(static) if (batch > 1 && input.size() > (1 << 14))
  for (Eigen::Index n = 0; n < batch; ++n) {
    const float* in = input.data() + n * input.rows();
    float* out = output.data() + n * output.rows();
    for (std::int64_t oy = 0; oy < out_h_; ++oy) {
      for (std::int64_t ox = 0; ox < out_w_; ++ox) {
        float* o = out + (oy * out_w_ + ox) * c;
        for (std::int64_t ch = 0; ch < c; ++ch) {
          o[ch] = b != nullptr ? b[ch] : 0.0f;
        }
        for_each_tap(oy, ox, in_h_, in_w_, options_, [&](std::int64_t tap, std::int64_t pixel) {
          const float* i = in + pixel * c;
          const float* wt = w + tap * c;
          for (std::int64_t ch = 0; ch < c; ++ch) {
            o[ch] += wt[ch] * i[ch];
          }
        });
      }
    }
  }
}

// The adjoint of forward: each output pixel's gradient flows back through the same taps.
void DepthwiseConv2d::backward(const Matrix&, const Matrix&, const Matrix& grad_output,
                               Matrix& grad_input) {
  const Eigen::Index batch = grad_output.cols();
  grad_input.setZero(static_cast<Eigen::Index>(input_size()), batch);
  const std::int64_t c = c_;
  const float* w = weight_.data();
#pragma omp parallel for schedule(static) if (batch > 1 && grad_input.size() > (1 << 14))
  for (Eigen::Index n = 0; n < batch; ++n) {
    const float* dy = grad_output.data() + n * grad_output.rows();
    float* dx = grad_input.data() + n * grad_input.rows();
    for (std::int64_t oy = 0; oy < out_h_; ++oy) {
      for (std::int64_t ox = 0; ox < out_w_; ++ox) {
        const float* d = dy + (oy * out_w_ + ox) * c;
        for_each_tap(oy, ox, in_h_, in_w_, options_, [&](std::int64_t tap, std::int64_t pixel) {
          float* g = dx + pixel * c;
          const float* wt = w + tap * c;
          for (std::int64_t ch = 0; ch < c; ++ch) {
            g[ch] += wt[ch] * d[ch];
          }
        });
      }
    }
  }
}

void DepthwiseConv2d::gradient(const Matrix& input, const Matrix& grad_output) {
  const Eigen::Index batch = grad_output.cols();
  const std::int64_t c = c_;
  const std::size_t weights = weight_grad_.size();
  const std::size_t per_chunk = weights + static_cast<std::size_t>(c);
  const Eigen::Index chunks = (batch + kGradientChunk - 1) / kGradientChunk;
  chunk_grads_.resize(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(static) if (chunks > 1 && input.size() > (1 << 14))
  for (Eigen::Index chunk = 0; chunk < chunks; ++chunk) {
    auto& acc = chunk_grads_[static_cast<std::size_t>(chunk)];
    acc.assign(per_chunk, 0.0f);
    float* dw = acc.data();
    float* db = acc.data() + weights;
    const Eigen::Index end = std::min(batch, (chunk + 1) * kGradientChunk);
    for (Eigen::Index n = chunk * kGradientChunk; n < end; ++n) {
      const float* in = input.data() + n * input.rows();
      const float* dy = grad_output.data() + n * grad_output.rows();
      for (std::int64_t oy = 0; oy < out_h_; ++oy) {
        for (std::int64_t ox = 0; ox < out_w_; ++ox) {
          const float* d = dy + (oy * out_w_ + ox) * c;
          for (std::int64_t ch = 0; ch < c; ++ch) {
            db[ch] += d[ch];
          }
          for_each_tap(oy, ox, in_h_, in_w_, options_, [&](std::int64_t tap, std::int64_t pixel) {
            const float* i = in + pixel * c;
            float* g = dw + tap * c;
            for (std::int64_t ch = 0; ch < c; ++ch) {
              g[ch] += d[ch] * i[ch];
            }
          });
        }
      }
    }
  }
  std::fill(weight_grad_.begin(), weight_grad_.end(), 0.0f);
  std::fill(bias_grad_.begin(), bias_grad_.end(), 0.0f);
  for (const auto& acc : chunk_grads_) {
    for (std::size_t i = 0; i < weights; ++i) {
      weight_grad_[i] += acc[i];
    }
    for (std::size_t i = 0; i < bias_grad_.size(); ++i) {
      bias_grad_[i] += acc[weights + i];
    }
  }
}

}  // namespace fedcore::model
