#include "shared/model/layers.hpp"

#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "shared/model/conv_wide.hpp"
#include "shared/util/threads.hpp"
#include "tests/model/gradient_check.hpp"

namespace fedcore::model {
namespace {

using testing::BoundLayer;
using testing::random_matrix;

Matrix column(std::initializer_list<float> values) {
  Matrix m(static_cast<Eigen::Index>(values.size()), 1);
  Eigen::Index i = 0;
  for (float v : values) {
    m(i++, 0) = v;
  }
  return m;
}

// ---- Dense -------------------------------------------------------------------------

// What `work()` returns with `threads` compute threads; the count is restored afterwards.
template <class Work>
auto with_threads(int threads, Work&& work) {
  const int before = compute_threads();
  set_compute_threads(threads);
  auto result = work();
  set_compute_threads(before);
  return result;
}

TEST(Dense, ForwardMatchesHandComputedValues) {
  BoundLayer dense(std::make_unique<Dense>(Shape{2}, 2));
  // weight {in, out} row-major: w[i][o]; then bias.
  dense.params = {1, 2, 3, 4, 0.5f, -1};
  Matrix y;
  dense.layer->forward(column({1, 2}), y, Phase::eval);
  ASSERT_EQ(y.rows(), 2);
  EXPECT_FLOAT_EQ(y(0, 0), 1 * 1 + 2 * 3 + 0.5f);
  EXPECT_FLOAT_EQ(y(1, 0), 1 * 2 + 2 * 4 - 1.0f);
}

TEST(Dense, ParamShapesAreInOutThenBias) {
  Dense dense(Shape{7, 3}, 5);
  const auto shapes = dense.param_shapes();
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0].shape, (Shape{21, 5}));
  EXPECT_EQ(shapes[1].shape, (Shape{5}));
  EXPECT_EQ(dense.output_shape(), (Shape{5}));
}

TEST(Dense, GradientsMatchFiniteDifferences) {
  Rng rng(1);
  BoundLayer dense(std::make_unique<Dense>(Shape{6}, 4));
  const Matrix x = random_matrix(6, 3, rng);
  testing::expect_input_gradient_matches(*dense.layer, x);
  testing::expect_param_gradient_matches(*dense.layer, dense.params, dense.grads, x);
}

// ---- Conv2d ------------------------------------------------------------------------

TEST(Conv2d, ForwardMatchesHandComputedValues) {
  BoundLayer conv(std::make_unique<Conv2d>(Shape{3, 3, 1}, Conv2dOptions{1, 2, 1, 0}));
  conv.params = {1, 2, 3, 4, 0};  // w[ky][kx] = 1 2 / 3 4, bias 0
  Matrix y;
  conv.layer->forward(column({1, 2, 3, 4, 5, 6, 7, 8, 9}), y, Phase::eval);
  ASSERT_EQ(conv.layer->output_shape(), (Shape{2, 2, 1}));
  EXPECT_FLOAT_EQ(y(0, 0), 37);
  EXPECT_FLOAT_EQ(y(1, 0), 47);
  EXPECT_FLOAT_EQ(y(2, 0), 67);
  EXPECT_FLOAT_EQ(y(3, 0), 77);
}

TEST(Conv2d, PaddingAndStrideMatchHandComputedValues) {
  BoundLayer conv(std::make_unique<Conv2d>(Shape{3, 3, 1}, Conv2dOptions{1, 2, 2, 1}));
  conv.params = {1, 2, 3, 4, 0.5f};
  Matrix y;
  conv.layer->forward(column({1, 2, 3, 4, 5, 6, 7, 8, 9}), y, Phase::eval);
  ASSERT_EQ(conv.layer->output_shape(), (Shape{2, 2, 1}));
  EXPECT_FLOAT_EQ(y(0, 0), 4 + 0.5f);
  EXPECT_FLOAT_EQ(y(1, 0), 18 + 0.5f);
  EXPECT_FLOAT_EQ(y(2, 0), 36 + 0.5f);
  EXPECT_FLOAT_EQ(y(3, 0), 77 + 0.5f);
}

// A direct, loop-by-loop convolution to compare the im2col path against on several
// channels, samples and a non-square input.
Matrix direct_conv(const Matrix& x, const std::vector<float>& p, std::int64_t h, std::int64_t w,
                   std::int64_t cin, const Conv2dOptions& o, std::int64_t oh, std::int64_t ow) {
  const auto k = o.kernel;
  const auto cout = o.out_channels;
  const float* bias = p.data() + k * k * cin * cout;
  Matrix y(oh * ow * cout, x.cols());
  for (Eigen::Index b = 0; b < x.cols(); ++b) {
    for (std::int64_t oy = 0; oy < oh; ++oy) {
      for (std::int64_t ox = 0; ox < ow; ++ox) {
        for (std::int64_t co = 0; co < cout; ++co) {
          double sum = bias[co];
          for (std::int64_t ky = 0; ky < k; ++ky) {
            for (std::int64_t kx = 0; kx < k; ++kx) {
              const auto iy = oy * o.stride - o.padding + ky;
              const auto ix = ox * o.stride - o.padding + kx;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) {
                continue;
              }
              for (std::int64_t ci = 0; ci < cin; ++ci) {
                sum += double(p[((ky * k + kx) * cin + ci) * cout + co]) *
                       x((iy * w + ix) * cin + ci, b);
              }
            }
          }
          y((oy * ow + ox) * cout + co, b) = static_cast<float>(sum);
        }
      }
    }
  }
  return y;
}

TEST(Conv2d, MatchesDirectConvolutionOnManyChannels) {
  Rng rng(5);
  const Conv2dOptions options{4, 3, 2, 1};
  BoundLayer conv(std::make_unique<Conv2d>(Shape{5, 6, 3}, options));
  const Matrix x = random_matrix(5 * 6 * 3, 2, rng);
  Matrix y;
  conv.layer->forward(x, y, Phase::eval);
  const auto& out = conv.layer->output_shape();
  const Matrix expected = direct_conv(x, conv.params, 5, 6, 3, options, out[0], out[1]);
  ASSERT_EQ(y.rows(), expected.rows());
  EXPECT_LE((y - expected).cwiseAbs().maxCoeff(), 1e-5f);
}

// Keeps the wide kernels (model/conv_wide.hpp) off for the layers built in its scope: on an
// AVX-512 CPU they would take the small-patch layers' forward pass and weight gradient.
struct WideKernelsOff {
  WideKernelsOff() { kernels::allow_wide_kernels(false); }
  ~WideKernelsOff() { kernels::allow_wide_kernels(true); }
  WideKernelsOff(const WideKernelsOff&) = delete;
  WideKernelsOff& operator=(const WideKernelsOff&) = delete;
};

// Layers with a receptive field of at most kernels::kDirectPatchMax floats and a multiple of
// 16 output channels take the direct kernels (model/conv_direct.hpp) where the wide ones do
// not: the first layer of the cnn (5x5 over one channel, "same" padding) and a strided 3x3
// over three channels.
TEST(Conv2d, TheDirectPathMatchesAConvolutionLoopByLoop) {
  const WideKernelsOff wide_off;
  struct Case {
    Shape input;
    Conv2dOptions options;
  };
  const Case cases[] = {{{12, 10, 1}, {32, 5, 1, 2}}, {{9, 7, 3}, {16, 3, 2, 1}}};
  Rng rng(9);
  for (const auto& c : cases) {
    BoundLayer conv(std::make_unique<Conv2d>(c.input, c.options));
    if (!kernels::direct_applies({c.input[0], c.input[1], c.input[2], 1, 1, c.options.out_channels,
                                  c.options.kernel, c.options.stride, c.options.padding})) {
      GTEST_SKIP() << "no AVX2 and FMA on this CPU: the direct path is not taken here";
    }
    ASSERT_EQ(static_cast<const Conv2d&>(*conv.layer).kernels(), ConvKernels::small_patch);
    for (auto& p : conv.params) {
      p = static_cast<float>(rng.uniform_double() - 0.5);
    }
    const auto inputs = static_cast<Eigen::Index>(element_count(c.input));
    const Matrix x = random_matrix(inputs, 3, rng);
    Matrix y;
    conv.layer->forward(x, y, Phase::eval);
    const auto& out = conv.layer->output_shape();
    const Matrix expected =
        direct_conv(x, conv.params, c.input[0], c.input[1], c.input[2], c.options, out[0], out[1]);
    ASSERT_EQ(y.rows(), expected.rows());
    EXPECT_LE((y - expected).cwiseAbs().maxCoeff(), 1e-5f) << "cin " << c.input[2];
    testing::expect_param_gradient_matches(*conv.layer, conv.params, conv.grads, x.leftCols(2));
    testing::expect_input_gradient_matches(*conv.layer, x.leftCols(2));
  }
}

// The direct path's weight gradient is summed chunk by chunk in chunk order: the same bits
// with one compute thread as with two, and the sum of what each sample gives alone.
TEST(Conv2d, TheDirectPathsWeightGradientDoesNotDependOnTheThreadCount) {
  const WideKernelsOff wide_off;
  Rng rng(12);
  BoundLayer conv(std::make_unique<Conv2d>(Shape{28, 28, 1}, Conv2dOptions{32, 5, 1, 2}));
  constexpr Eigen::Index kBatch = 60;  // 81 KB of columns a sample: several chunks
  const Matrix x = random_matrix(28 * 28, kBatch, rng);
  const Matrix dy = random_matrix(28 * 28 * 32, kBatch, rng);
  const auto gradient = [&](const Matrix& input, const Matrix& grad_output) {
    conv.layer->gradient(input, grad_output);
    return conv.grads;
  };
  const auto two = with_threads(2, [&] { return gradient(x, dy); });
  const auto one = with_threads(1, [&] { return gradient(x, dy); });
  EXPECT_EQ(one, two);
  std::vector<double> summed(one.size(), 0.0);
  for (Eigen::Index b = 0; b < kBatch; ++b) {
    const auto alone = gradient(x.col(b), dy.col(b));
    for (std::size_t i = 0; i < summed.size(); ++i) {
      summed[i] += alone[i];
    }
  }
  for (std::size_t i = 0; i < summed.size(); ++i) {
    ASSERT_NEAR(summed[i], one[i], 1e-3 * (1.0 + std::abs(summed[i]))) << "grad " << i;
  }
}

// ---- Conv2d: the wide path (model/conv_wide.hpp) ----------------------------------

struct ConvCase {
  Shape input;
  Conv2dOptions options;
  kernels::ConvGeometry geometry() const {
    const auto out = [&](std::int64_t in) {
      return (in + 2 * options.padding - options.kernel) / options.stride + 1;
    };
    return {input[0],       input[1],       input[2],
            out(input[0]),  out(input[1]),  options.out_channels,
            options.kernel, options.stride, options.padding};
  }
};

// Calls visit(b, out_pixel, in_pixel, tap) for every sample, output pixel and kernel tap
// (ky * kernel + kx) whose input pixel lies inside the image; pixels are row-major indices.
template <class Visit>
void for_each_window_tap(const kernels::ConvGeometry& g, Eigen::Index batch, Visit&& visit) {
  for (Eigen::Index b = 0; b < batch; ++b) {
    for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
      for (std::int64_t ox = 0; ox < g.out_w; ++ox) {
        for (std::int64_t ky = 0; ky < g.kernel; ++ky) {
          for (std::int64_t kx = 0; kx < g.kernel; ++kx) {
            const auto iy = oy * g.stride - g.padding + ky;
            const auto ix = ox * g.stride - g.padding + kx;
            if (iy >= 0 && iy < g.in_h && ix >= 0 && ix < g.in_w) {
              visit(b, oy * g.out_w + ox, iy * g.in_w + ix, ky * g.kernel + kx);
            }
          }
        }
      }
    }
  }
}

// d(sum r .* y)/dx and d(...)/d(weights, bias) of a convolution, loop by loop in double.
Matrix reference_input_gradient(const Matrix& dy, const std::vector<float>& p,
                                const kernels::ConvGeometry& g) {
  Eigen::MatrixXd dx = Eigen::MatrixXd::Zero(g.in_h * g.in_w * g.in_c, dy.cols());
  for_each_window_tap(g, dy.cols(), [&](Eigen::Index b, auto out, auto in, auto tap) {
    for (std::int64_t ci = 0; ci < g.in_c; ++ci) {
      for (std::int64_t co = 0; co < g.out_c; ++co) {
        dx(in * g.in_c + ci, b) +=
            double(p[(tap * g.in_c + ci) * g.out_c + co]) * dy(out * g.out_c + co, b);
      }
    }
  });
  return dx.cast<float>();
}

std::vector<double> reference_param_gradient(const Matrix& x, const Matrix& dy, bool bias,
                                             const kernels::ConvGeometry& g) {
  const auto patch = g.kernel * g.kernel * g.in_c;
  std::vector<double> grads(static_cast<std::size_t>(patch * g.out_c + (bias ? g.out_c : 0)), 0.0);
  for_each_window_tap(g, x.cols(), [&](Eigen::Index b, auto out, auto in, auto tap) {
    for (std::int64_t ci = 0; ci < g.in_c; ++ci) {
      for (std::int64_t co = 0; co < g.out_c; ++co) {
        grads[static_cast<std::size_t>((tap * g.in_c + ci) * g.out_c + co)] +=
            double(dy(out * g.out_c + co, b)) * x(in * g.in_c + ci, b);
      }
    }
  });
  if (bias) {
    for (Eigen::Index i = 0; i < dy.size(); ++i) {
      grads[static_cast<std::size_t>(patch * g.out_c + i % g.out_c)] += dy.data()[i];
    }
  }
  return grads;
}

template <class Got, class Want>
float largest_difference(const Got& got, const Want& want, std::size_t count) {
  float largest = 0;
  for (std::size_t i = 0; i < count; ++i) {
    largest = std::max(largest, std::abs(static_cast<float>(got[i] - want[i])) /
                                    (1.0f + std::abs(static_cast<float>(want[i]))));
  }
  return largest;
}

// The cnn's second layer, and shapes that reach every register block (widths 11 and 19:
// blocks of 14, 8, 4, 2 and 1 pixels; 48 channels: a block of 32 then one of 16), without
// padding and without a bias; then layers whose input gradient goes through the product:
// input channels that are not a multiple of 16 (the cnn's first layer, a CIFAR cnn's
// first: kernel rows of 5 and 15 taps, blocks of 4 and 1, of 8, 4, 2 and 1) and stride 2
// (ImageNet-stride MobileNetV2's stem; 16 channels at stride 2).
const ConvCase kWideCases[] = {
    {{14, 14, 32}, {64, 5, 1, 2}},       {{9, 11, 16}, {48, 3, 1, 1}},
    {{6, 21, 16}, {16, 3, 1, 0, false}}, {{12, 10, 1}, {32, 5, 1, 2}},
    {{11, 9, 3}, {16, 5, 1, 2}},         {{13, 33, 3}, {16, 3, 2, 1, false}},
    {{10, 9, 16}, {32, 3, 2, 1}}};

TEST(Conv2d, TheWidePathMatchesConvolutionLoopsInEveryPass) {
  if (!kernels::wide_applies(kWideCases[0].geometry())) {
    GTEST_SKIP() << "no x86-64-v4 on this CPU (or build): the wide path is not taken here";
  }
  // Float sums of up to 1,600 products against double ones, relative to 1 + |value|.
  constexpr float kTolerance = 5e-5f;
  Rng rng(21);
  for (const auto& c : kWideCases) {
    BoundLayer conv(std::make_unique<Conv2d>(c.input, c.options));
    const auto& layer = static_cast<const Conv2d&>(*conv.layer);
    ASSERT_EQ(layer.kernels(), c.input[2] % 16 == 0 && c.options.stride == 1
                                   ? ConvKernels::direct_wide
                                   : ConvKernels::wide_forward)
        << "cin " << c.input[2] << ", stride " << c.options.stride;
    const auto g = c.geometry();
    for (auto& p : conv.params) {
      p = static_cast<float>(rng.uniform_double() - 0.5);
    }
    const Matrix x = random_matrix(static_cast<Eigen::Index>(element_count(c.input)), 3, rng);
    const Matrix dy = random_matrix(g.out_h * g.out_w * g.out_c, 3, rng);
    Matrix y;
    conv.layer->forward(x, y, Phase::train);
    auto with_bias = conv.params;  // direct_conv reads a bias after the weights
    with_bias.resize(static_cast<std::size_t>(g.kernel * g.kernel * g.in_c * g.out_c + g.out_c));
    const Matrix expected =
        direct_conv(x, with_bias, g.in_h, g.in_w, g.in_c, c.options, g.out_h, g.out_w);
    ASSERT_EQ(y.rows(), expected.rows());
    EXPECT_LE(largest_difference(y.data(), expected.data(), static_cast<std::size_t>(y.size())),
              kTolerance)
        << "forward, " << g.in_h << "x" << g.in_w << "x" << g.in_c;
    Matrix dx;
    conv.layer->backward(x, y, dy, dx);
    const Matrix expected_dx = reference_input_gradient(dy, conv.params, g);
    ASSERT_EQ(dx.rows(), expected_dx.rows());
    EXPECT_LE(
        largest_difference(dx.data(), expected_dx.data(), static_cast<std::size_t>(dx.size())),
        kTolerance)
        << "input gradient, " << g.in_h << "x" << g.in_w << "x" << g.in_c;
    conv.layer->gradient(x, dy);
    const auto expected_grads = reference_param_gradient(x, dy, c.options.bias, g);
    ASSERT_EQ(conv.grads.size(), expected_grads.size());
    EXPECT_LE(largest_difference(conv.grads, expected_grads, expected_grads.size()), kTolerance)
        << "weight gradient, " << g.in_h << "x" << g.in_w << "x" << g.in_c;
  }
}

// Forward and input gradient go sample by sample, the weight gradient chunk by chunk in
// chunk order: the same bits with one compute thread as with two.
TEST(Conv2d, TheWidePathDoesNotDependOnTheThreadCount) {
  const auto& c = kWideCases[0];
  if (!kernels::wide_applies(c.geometry())) {
    GTEST_SKIP() << "no x86-64-v4 on this CPU (or build): the wide path is not taken here";
  }
  Rng rng(22);
  BoundLayer conv(std::make_unique<Conv2d>(c.input, c.options));
  for (auto& p : conv.params) {
    p = static_cast<float>(rng.uniform_double() - 0.5);
  }
  constexpr Eigen::Index kBatch = 9;  // 0.6 MB of columns a sample: several chunks
  const Matrix x = random_matrix(14 * 14 * 32, kBatch, rng);
  const Matrix dy = random_matrix(14 * 14 * 64, kBatch, rng);
  struct Passes {
    Matrix y, dx;
    std::vector<float> grads;
  };
  const auto passes = [&] {
    Passes out;
    conv.layer->forward(x, out.y, Phase::train);
    conv.layer->backward(x, out.y, dy, out.dx);
    conv.layer->gradient(x, dy);
    out.grads = conv.grads;
    return out;
  };
  const auto one = with_threads(1, passes);
  const auto two = with_threads(2, passes);
  EXPECT_EQ(one.y, two.y);
  EXPECT_EQ(one.dx, two.dx);
  EXPECT_EQ(one.grads, two.grads);
}

TEST(Conv2d, TheWidePathIsTakenOnlyWhereItsKernelsFit) {
  auto g = kWideCases[0].geometry();
  g.stride = 2;
  g.out_h = g.out_w = 7;
  EXPECT_FALSE(kernels::wide_applies(g)) << "stride 2";
  for (const std::int64_t channels : {8, 24}) {
    auto in = kWideCases[0].geometry();
    in.in_c = channels;
    EXPECT_FALSE(kernels::wide_applies(in)) << channels << " input channels";
    auto out = kWideCases[0].geometry();
    out.out_c = channels;
    EXPECT_FALSE(kernels::wide_applies(out)) << channels << " output channels";
    EXPECT_FALSE(kernels::wide_forward_applies(out)) << channels << " output channels";
  }
  auto padded = ConvCase{{8, 8, 16}, {16, 3, 1, 3}}.geometry();
  EXPECT_FALSE(kernels::wide_applies(padded)) << "padding beyond kernel - 1";
  // Input channels that are not a multiple of 16: forward and weight gradient only (on a
  // CPU that takes the wide kernels at all).
  const bool cpu_takes_them = kernels::wide_applies(kWideCases[0].geometry());
  auto eight = kWideCases[0].geometry();
  eight.in_c = 8;
  EXPECT_EQ(kernels::wide_forward_applies(eight), cpu_takes_them);
  EXPECT_EQ(kernels::wide_forward_applies(g), cpu_takes_them) << "stride 2";
  const Conv2d first(Shape{28, 28, 1}, Conv2dOptions{32, 5, 1, 2});
  EXPECT_NE(first.kernels(), ConvKernels::direct_wide);
  if (cpu_takes_them) {
    EXPECT_EQ(first.kernels(), ConvKernels::wide_forward);
  }
  // Benchmarks that emulate a CPU without AVX-512 turn the path off for new layers.
  kernels::allow_wide_kernels(false);
  const Conv2d second(kWideCases[0].input, kWideCases[0].options);
  kernels::allow_wide_kernels(true);
  EXPECT_EQ(second.kernels(), ConvKernels::im2col_gemm);
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  Rng rng(2);
  BoundLayer conv(std::make_unique<Conv2d>(Shape{5, 4, 2}, Conv2dOptions{3, 3, 1, 1}));
  const Matrix x = random_matrix(5 * 4 * 2, 2, rng);
  testing::expect_input_gradient_matches(*conv.layer, x);
  testing::expect_param_gradient_matches(*conv.layer, conv.params, conv.grads, x);
}

TEST(Conv2d, StridedGradientsMatchFiniteDifferences) {
  Rng rng(3);
  BoundLayer conv(std::make_unique<Conv2d>(Shape{6, 6, 1}, Conv2dOptions{2, 3, 2, 0}));
  const Matrix x = random_matrix(36, 3, rng);
  testing::expect_input_gradient_matches(*conv.layer, x);
  testing::expect_param_gradient_matches(*conv.layer, conv.params, conv.grads, x);
}

// A batch of several chunks (28x28x32 under a 5x5 kernel makes 2.5 MB of columns per
// sample, more than kConvChunkBytes: one sample per chunk) gives every sample the output and
// input gradient it gets alone, the sum of their weight gradients, and the same bits with
// one compute thread as with two (the chunks' weight gradients are summed in chunk order).
TEST(Conv2d, ABatchOfSeveralChunksGivesWhatEachSampleGivesAlone) {
  Rng rng(7);
  const Conv2dOptions options{8, 5, 1, 2};
  BoundLayer conv(std::make_unique<Conv2d>(Shape{28, 28, 32}, options));
  constexpr Eigen::Index kBatch = 3;
  const Matrix x = random_matrix(28 * 28 * 32, kBatch, rng);
  const auto outputs = static_cast<Eigen::Index>(conv.layer->output_size());
  const Matrix dy = random_matrix(outputs, kBatch, rng);

  struct Result {
    Matrix y, dx;
    std::vector<float> grads;
  };
  const auto run = [&](const Matrix& input, const Matrix& grad_output) {
    Result r;
    conv.layer->forward(input, r.y, Phase::train);
    conv.layer->gradient(input, grad_output);
    conv.layer->backward(input, r.y, grad_output, r.dx);
    r.grads = conv.grads;
    return r;
  };
  const Result batch = with_threads(2, [&] { return run(x, dy); });
  const Result one_thread = with_threads(1, [&] { return run(x, dy); });
  EXPECT_EQ(batch.grads, one_thread.grads);
  EXPECT_EQ((batch.y - one_thread.y).cwiseAbs().maxCoeff(), 0.0f);

  std::vector<float> summed(conv.grads.size(), 0.0f);
  for (Eigen::Index b = 0; b < kBatch; ++b) {
    const Result alone = run(x.col(b), dy.col(b));
    EXPECT_LE((alone.y - batch.y.col(b)).cwiseAbs().maxCoeff(), 1e-5f) << "sample " << b;
    EXPECT_LE((alone.dx - batch.dx.col(b)).cwiseAbs().maxCoeff(), 1e-5f) << "sample " << b;
    for (std::size_t i = 0; i < summed.size(); ++i) {
      summed[i] += alone.grads[i];
    }
  }
  for (std::size_t i = 0; i < summed.size(); ++i) {
    ASSERT_NEAR(summed[i], batch.grads[i], 1e-3f * (1.0f + std::abs(summed[i]))) << "grad " << i;
  }
}

// ---- MaxPool2d ---------------------------------------------------------------------

TEST(MaxPool2d, ForwardMatchesHandComputedValues) {
  MaxPool2d pool(Shape{4, 4, 1}, 2);
  Matrix y;
  pool.forward(column({1, 5, 2, 0,  //
                       3, 4, 8, 1,  //
                       0, 0, 1, 1,  //
                       9, 2, 1, 7}),
               y, Phase::eval);
  ASSERT_EQ(pool.output_shape(), (Shape{2, 2, 1}));
  EXPECT_FLOAT_EQ(y(0, 0), 5);
  EXPECT_FLOAT_EQ(y(1, 0), 8);
  EXPECT_FLOAT_EQ(y(2, 0), 9);
  EXPECT_FLOAT_EQ(y(3, 0), 7);
}

TEST(MaxPool2d, KeepsChannelsApart) {
  MaxPool2d pool(Shape{2, 2, 2}, 2);
  Matrix y;
  // HWC: (pixel, channel) pairs; channel 0 max is 4, channel 1 max is -1.
  pool.forward(column({1, -5, 4, -1, 2, -3, 3, -2}), y, Phase::eval);
  EXPECT_FLOAT_EQ(y(0, 0), 4);
  EXPECT_FLOAT_EQ(y(1, 0), -1);
}

TEST(MaxPool2d, InputGradientMatchesFiniteDifferences) {
  // Distinct values spaced well beyond the finite-difference step, so no perturbation
  // changes which element wins a window.
  Rng rng(4);
  Matrix x(6 * 6 * 2, 2);
  std::vector<float> values(static_cast<std::size_t>(x.size()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = 0.1f * static_cast<float>(i);
  }
  rng.shuffle(std::span<float>(values));
  std::copy(values.begin(), values.end(), x.data());
  MaxPool2d pool(Shape{6, 6, 2}, 2);
  testing::expect_input_gradient_matches(pool, x);
}

TEST(MaxPool2d, OverlappingWindowsRouteGradientToEachWinner) {
  MaxPool2d pool(Shape{3, 3, 1}, 2, 1);
  ASSERT_EQ(pool.output_shape(), (Shape{2, 2, 1}));
  const Matrix x = column({0, 0, 0, 0, 9, 0, 0, 0, 0});  // the centre wins all four windows
  Matrix y, dx;
  pool.forward(x, y, Phase::train);
  pool.backward(x, y, Matrix::Ones(4, 1), dx);
  EXPECT_FLOAT_EQ(dx(4, 0), 4);
  EXPECT_FLOAT_EQ(dx.sum(), 4);
}

// A gradient buffer that held another batch's values gets this batch's gradient alone.
TEST(MaxPool2d, BackwardOverwritesEveryElementOfAReusedBuffer) {
  MaxPool2d pool(Shape{4, 4, 2}, 2);
  Rng rng(5);
  const Matrix x = random_matrix(4 * 4 * 2, 3, rng);
  Matrix y;
  pool.forward(x, y, Phase::train);
  Matrix dx = Matrix::Constant(x.rows(), x.cols(), 7.0f);
  pool.backward(x, y, Matrix::Ones(y.rows(), y.cols()), dx);
  // Non-overlapping windows: one winner per window gets 1, every other element 0.
  EXPECT_EQ((dx.array() == 1.0f).count(), y.size());
  EXPECT_EQ((dx.array() == 0.0f).count(), x.size() - y.size());
}

// The cnn pools before its ReLU (shared/model/spec.cpp) on the strength of this: the two
// orders give the same values and the same input gradient, bit for bit, including windows
// that are all negative, hold zeros, or tie for their maximum.
TEST(MaxPool2d, CommutesWithReLUInValueAndGradient) {
  const Shape shape{6, 6, 3};
  constexpr Eigen::Index kBatch = 4;
  const auto inputs = static_cast<Eigen::Index>(element_count(shape));
  Rng rng(11);
  Matrix x(inputs, kBatch);
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    // Five levels from -2 to 2: ties and zeros in most windows, all-negative ones too.
    x.data()[i] = static_cast<float>(static_cast<int>(rng.uniform_double() * 5.0) - 2);
  }
  for (Eigen::Index r = 0; r < inputs; ++r) {
    x(r, 0) = -1.0f - static_cast<float>(r % 3);  // sample 0: every window negative
  }
  const Matrix dy = random_matrix(3 * 3 * 3, kBatch, rng);

  ReLU relu_first(shape);
  MaxPool2d pool_second(shape, 2);
  Matrix r1, p1, dp1, dx1;
  relu_first.forward(x, r1, Phase::train);
  pool_second.forward(r1, p1, Phase::train);
  pool_second.backward(r1, p1, dy, dp1);
  relu_first.backward(x, r1, dp1, dx1);

  MaxPool2d pool_first(shape, 2);
  ReLU relu_second(pool_first.output_shape());
  Matrix p2, r2, dr2, dx2;
  pool_first.forward(x, p2, Phase::train);
  relu_second.forward(p2, r2, Phase::train);
  relu_second.backward(p2, r2, dy, dr2);
  pool_first.backward(x, p2, dr2, dx2);

  EXPECT_EQ(p1, r2);
  EXPECT_EQ(dx1, dx2);
  EXPECT_GT((dx1.array() != 0.0f).count(), 0);   // some gradient got through
  EXPECT_EQ(dx1.col(0).cwiseAbs().sum(), 0.0f);  // none through the all-negative sample
}

// ---- ReLU, Flatten, Dropout ----------------------------------------------------------

TEST(ReLU, ForwardMatchesHandComputedValues) {
  ReLU relu(Shape{4});
  Matrix y;
  relu.forward(column({-1, 0, 2, -0.5f}), y, Phase::eval);
  EXPECT_EQ(y, column({0, 0, 2, 0}));
}

TEST(ReLU, InputGradientMatchesFiniteDifferences) {
  // Keep inputs away from the kink at 0 (|x| >= 0.1 > the step).
  Rng rng(6);
  Matrix x = random_matrix(10, 3, rng);
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    x.data()[i] += x.data()[i] >= 0 ? 0.1f : -0.1f;
  }
  ReLU relu(Shape{10});
  testing::expect_input_gradient_matches(relu, x);
}

TEST(Flatten, KeepsValuesAndFlattensShape) {
  Flatten flatten(Shape{2, 3, 4});
  EXPECT_EQ(flatten.output_shape(), (Shape{24}));
  Rng rng(7);
  const Matrix x = random_matrix(24, 2, rng);
  Matrix y;
  flatten.forward(x, y, Phase::eval);
  EXPECT_EQ(y, x);
  testing::expect_input_gradient_matches(flatten, x);
}

TEST(Dropout, IsIdentityInEvaluation) {
  BoundLayer dropout(std::make_unique<Dropout>(Shape{100}, 0.5f));
  Rng rng(8);
  const Matrix x = random_matrix(100, 4, rng);
  Matrix y;
  dropout.layer->forward(x, y, Phase::eval);
  EXPECT_EQ(y, x);
}

TEST(Dropout, TrainingZeroesAboutRateAndScalesTheRest) {
  BoundLayer dropout(std::make_unique<Dropout>(Shape{1000}, 0.25f));
  const Matrix x = Matrix::Ones(1000, 10);
  Matrix y;
  dropout.layer->forward(x, y, Phase::train);
  const auto zeros = (y.array() == 0.0f).count();
  EXPECT_NEAR(double(zeros) / 10000.0, 0.25, 0.02);
  EXPECT_TRUE(((y.array() == 0.0f) || (y.array() == 1.0f / 0.75f)).all());
  // Backward applies the same mask: the input gradient equals the mask.
  Matrix dx;
  dropout.layer->backward(x, y, Matrix::Ones(1000, 10), dx);
  EXPECT_EQ(dx, y);
}

}  // namespace
}  // namespace fedcore::model
