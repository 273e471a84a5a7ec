// The wide direct convolution's loops for x86-64-v4 (this file alone gets -march=x86-64-v4
// and FMA contraction; shared/CMakeLists.txt). Called only after the cpuid check of wide_*_applies.
//
// Like gemm_avx512.cpp, the file defines nothing but its entry points
// (tests/model/isa_objects_test.sh): it calls no inline function or template of another
// header (not even ConvGeometry's members or std::min), so the linker can never keep an
// AVX-512 copy of one for the rest of a portable program.
#include <cstdint>
#include <cstring>

#include "shared/model/conv_wide.hpp"

namespace fedcore::model::kernels::avx512 {
namespace {

using Sixteen = float __attribute__((vector_size(16 * sizeof(float))));
constexpr int kLanes = 16;
// Output pixels per register block: 14 pixels x 2 registers of channels are 28 of the 32
// accumulators, the tap's 2 weight registers the rest (the input is broadcast from memory).
// 14 is also the cnn's row: no remainder there. Other widths end in blocks of 8, 4, 2, 1.
constexpr int kRowBlock = 14;
// Taps summed at once by the weight gradient: 16 accumulators of 16 channels each; a kernel
// row's last taps go in blocks of 8, 4, 2 and 1.
constexpr int kTapBlock = 16;

[[gnu::always_inline]] inline void load(Sixteen& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}

[[gnu::always_inline]] inline void store(float* p, const Sixteen& v) {
  std::memcpy(p, &v, sizeof v);
}

// Pixels [0, Pixels) from `window` (the first pixel's window origin) and channels
// [0, Halves * 16) from `weights` (already offset to the block's first channel).
template <int Pixels, int Halves>
[[gnu::always_inline]] inline void pixel_block(const float* __restrict window, std::int64_t in_row,
                                               std::int64_t in_c, std::int64_t pixel_step,
                                               const float* __restrict weights, std::int64_t kernel,
                                               const float* __restrict bias, float* __restrict out,
                                               std::int64_t out_c) {
  Sixteen acc[Pixels][Halves];
#pragma GCC unroll 4
  for (int h = 0; h < Halves; ++h) {
    Sixteen start{};
    if (bias != nullptr) {
      load(start, bias + kLanes * h);
    }
#pragma GCC unroll 16
    for (int j = 0; j < Pixels; ++j) {
      acc[j][h] = start;
    }
  }
  for (std::int64_t ky = 0; ky < kernel; ++ky) {
    for (std::int64_t kx = 0; kx < kernel; ++kx) {
      const float* x = window + ky * in_row + kx * in_c;
      const float* w = weights + (ky * kernel + kx) * in_c * out_c;
      for (std::int64_t ci = 0; ci < in_c; ++ci) {
        Sixteen wv[Halves];
#pragma GCC unroll 4
        for (int h = 0; h < Halves; ++h) {
          load(wv[h], w + ci * out_c + kLanes * h);
        }
#pragma GCC unroll 16
        for (int j = 0; j < Pixels; ++j) {
          const float v = x[j * pixel_step + ci];
#pragma GCC unroll 4
          for (int h = 0; h < Halves; ++h) {
            acc[j][h] += v * wv[h];
          }
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < Pixels; ++j) {
#pragma GCC unroll 4
    for (int h = 0; h < Halves; ++h) {
      store(out + j * out_c + kLanes * h, acc[j][h]);
    }
  }
}

// One output row's pixels, for channels [0, Halves * 16) of the block.
template <int Halves>
void row_blocks(const float* window_row, std::int64_t in_row, std::int64_t in_c,
                std::int64_t pixel_step, const float* weights, std::int64_t kernel,
                const float* bias, float* out_row, std::int64_t out_w, std::int64_t out_c) {
  std::int64_t ox = 0;
  const auto at = [&](std::int64_t pixel) { return window_row + pixel * pixel_step; };
  for (; ox + kRowBlock <= out_w; ox += kRowBlock) {
    pixel_block<kRowBlock, Halves>(at(ox), in_row, in_c, pixel_step, weights, kernel, bias,
                                   out_row + ox * out_c, out_c);
  }
  if (ox + 8 <= out_w) {
    pixel_block<8, Halves>(at(ox), in_row, in_c, pixel_step, weights, kernel, bias,
                           out_row + ox * out_c, out_c);
    ox += 8;
  }
  if (ox + 4 <= out_w) {
    pixel_block<4, Halves>(at(ox), in_row, in_c, pixel_step, weights, kernel, bias,
                           out_row + ox * out_c, out_c);
    ox += 4;
  }
  if (ox + 2 <= out_w) {
    pixel_block<2, Halves>(at(ox), in_row, in_c, pixel_step, weights, kernel, bias,
                           out_row + ox * out_c, out_c);
    ox += 2;
  }
  if (ox < out_w) {
    pixel_block<1, Halves>(at(ox), in_row, in_c, pixel_step, weights, kernel, bias,
                           out_row + ox * out_c, out_c);
  }
}

// dw[t, :16] += sum over pixels of window[pixel][t] * dy[pixel][:16] for taps
// t in [0, Taps) from `taps`: consecutive floats of one kernel row's window.
template <int Taps>
void tap_block(const float* __restrict taps, std::int64_t row_step, std::int64_t pixel_step,
               const float* __restrict dy, std::int64_t out_h, std::int64_t out_w,
               std::int64_t out_c, float* __restrict dw) {
  Sixteen acc[Taps];
#pragma GCC unroll 16
  for (int t = 0; t < Taps; ++t) {
    acc[t] = Sixteen{};
  }
  for (std::int64_t oy = 0; oy < out_h; ++oy) {
    const float* x_row = taps + oy * row_step;
    const float* dy_row = dy + oy * out_w * out_c;
    for (std::int64_t ox = 0; ox < out_w; ++ox) {
      Sixteen d;
      load(d, dy_row + ox * out_c);
      const float* x = x_row + ox * pixel_step;
#pragma GCC unroll 16
      for (int t = 0; t < Taps; ++t) {
        acc[t] += x[t] * d;
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < Taps; ++t) {
    Sixteen sum;
    load(sum, dw + t * out_c);
    sum += acc[t];
    store(dw + t * out_c, sum);
  }
}

// One kernel row's taps, (kx, ci) in order: kernel * in_c consecutive floats of the window
// (so of dw's taps too), in blocks of 16, then 8, 4, 2, 1.
void kernel_row_taps(const float* taps, std::int64_t row_taps, std::int64_t row_step,
                     std::int64_t pixel_step, const float* dy, std::int64_t out_h,
                     std::int64_t out_w, std::int64_t out_c, float* dw) {
  std::int64_t p = 0;
  const auto block = [&]<int Taps>() {
    tap_block<Taps>(taps + p, row_step, pixel_step, dy, out_h, out_w, out_c, dw + p * out_c);
    p += Taps;
  };
  while (p + kTapBlock <= row_taps) {
    block.template operator()<kTapBlock>();
  }
  if (p + 8 <= row_taps) {
    block.template operator()<8>();
  }
  if (p + 4 <= row_taps) {
    block.template operator()<4>();
  }
  if (p + 2 <= row_taps) {
    block.template operator()<2>();
  }
  if (p < row_taps) {
    block.template operator()<1>();
  }
}

}  // namespace

void convolve_plane(const float* in, std::int64_t in_w, std::int64_t in_c, const float* weights,
                    std::int64_t kernel, std::int64_t stride, const float* bias, float* out,
                    std::int64_t out_h, std::int64_t out_w, std::int64_t out_c) {
  const auto in_row = in_w * in_c;
  const auto pixel_step = stride * in_c;
  for (std::int64_t oy = 0; oy < out_h; ++oy) {
    const float* window_row = in + oy * stride * in_row;
    float* out_row = out + oy * out_w * out_c;
    std::int64_t cb = 0;
    for (; cb + 2 * kLanes <= out_c; cb += 2 * kLanes) {
      row_blocks<2>(window_row, in_row, in_c, pixel_step, weights + cb, kernel,
                    bias != nullptr ? bias + cb : nullptr, out_row + cb, out_w, out_c);
    }
    if (cb < out_c) {
      row_blocks<1>(window_row, in_row, in_c, pixel_step, weights + cb, kernel,
                    bias != nullptr ? bias + cb : nullptr, out_row + cb, out_w, out_c);
    }
  }
}

void accumulate_weight_gradient(const float* in, std::int64_t in_w, std::int64_t in_c,
                                const float* dy, std::int64_t out_h, std::int64_t out_w,
                                std::int64_t out_c, std::int64_t kernel, std::int64_t stride,
                                float* dw, float* db) {
  const auto in_row = in_w * in_c;
  const auto row_taps = kernel * in_c;
  for (std::int64_t ky = 0; ky < kernel; ++ky) {
    for (std::int64_t cb = 0; cb < out_c; cb += kLanes) {
      kernel_row_taps(in + ky * in_row, row_taps, stride * in_row, stride * in_c, dy + cb, out_h,
                      out_w, out_c, dw + ky * row_taps * out_c + cb);
    }
  }
  if (db != nullptr) {
    const auto pixels = out_h * out_w;
    for (std::int64_t cb = 0; cb < out_c; cb += kLanes) {
      Sixteen sum;
      load(sum, db + cb);
      for (std::int64_t i = 0; i < pixels; ++i) {
        Sixteen d;
        load(d, dy + i * out_c + cb);
        sum += d;
      }
      store(db + cb, sum);
    }
  }
}

}  // namespace fedcore::model::kernels::avx512
