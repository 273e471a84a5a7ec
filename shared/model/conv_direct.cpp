#include "shared/model/conv_direct.hpp"

#include <algorithm>
#include <cstring>

#include "shared/model/dispatch.hpp"

namespace fedcore::model::kernels {
namespace {

constexpr int kBlock = static_cast<int>(kDirectChannelBlock);
// Pixels (forward) or taps (weight gradient) accumulated at once: four independent sums,
// enough to hide an FMA's latency, each kBlock channels wide (one AVX-512 register, two AVX2).
constexpr int kLanes = 4;

// Where tap p = (ky * k + kx) * cin + ci of the window at the padded sample's origin lies.
struct TapOffsets {
  std::int64_t at[kDirectPatchMax];
  std::int64_t count;
};

TapOffsets tap_offsets(const ConvGeometry& g) {
  TapOffsets taps{};
  const auto row = g.padded_w() * g.in_c;
  taps.count = g.kernel * g.kernel * g.in_c;
  for (std::int64_t ky = 0; ky < g.kernel; ++ky) {
    for (std::int64_t kx = 0; kx < g.kernel; ++kx) {
      for (std::int64_t ci = 0; ci < g.in_c; ++ci) {
        taps.at[(ky * g.kernel + kx) * g.in_c + ci] = ky * row + kx * g.in_c + ci;
      }
    }
  }
  return taps;
}

// Eight channels as one value, kBlock = two of them: GCC and Clang keep it in one AVX
// register (the vectorizer, left to itself, ran the loops across the pixels instead, four
// at a time). Not sixteen in one value: where the clone has no AVX-512, GCC kept such
// 64-byte values on the stack, 3x slower than the product it replaces.
using Eight = float __attribute__((vector_size(8 * sizeof(float))));
constexpr int kHalves = kBlock / 8;
static_assert(kBlock % 8 == 0);

// By reference: a vector passed or returned by value has another ABI in the clones without
// AVX, which GCC and Clang warn about.
[[gnu::always_inline]] inline void load(Eight& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}

[[gnu::always_inline]] inline void store(float* p, const Eight& v) {
  std::memcpy(p, &v, sizeof v);
}

// Pixels [ox, ox + Pixels) of one output row, channels [cb, cb + kBlock).
template <int Pixels>
[[gnu::always_inline]] inline void forward_pixels(const float* __restrict window,
                                                  std::int64_t pixel_step,
                                                  const float* __restrict weights,
                                                  const float* __restrict bias,
                                                  float* __restrict out, std::int64_t cout,
                                                  const TapOffsets& taps) {
  Eight acc[Pixels][kHalves];
  for (int h = 0; h < kHalves; ++h) {
    Eight start{};
    if (bias != nullptr) {
      load(start, bias + 8 * h);
    }
    for (int j = 0; j < Pixels; ++j) {
      acc[j][h] = start;
    }
  }
  for (std::int64_t p = 0; p < taps.count; ++p) {
    Eight w[kHalves];
    for (int h = 0; h < kHalves; ++h) {
      load(w[h], weights + p * cout + 8 * h);
    }
    const float* x = window + taps.at[p];
    for (int j = 0; j < Pixels; ++j) {
      const float v = x[j * pixel_step];
      for (int h = 0; h < kHalves; ++h) {
        acc[j][h] += v * w[h];
      }
    }
  }
  for (int j = 0; j < Pixels; ++j) {
    for (int h = 0; h < kHalves; ++h) {
      store(out + j * cout + 8 * h, acc[j][h]);
    }
  }
}

// Taps [p, p + Taps) of channels [cb, cb + kBlock), summed over the pixels.
template <int Taps>
[[gnu::always_inline]] inline void gradient_taps(const float* __restrict padded,
                                                 const float* __restrict dy, float* __restrict dw,
                                                 std::int64_t p, const TapOffsets& taps,
                                                 const ConvGeometry& g) {
  Eight acc[Taps][kHalves];
  std::int64_t at[Taps];
  for (int t = 0; t < Taps; ++t) {
    for (int h = 0; h < kHalves; ++h) {
      acc[t][h] = Eight{};
    }
    at[t] = taps.at[p + t];
  }
  const auto row = g.padded_w() * g.in_c;
  const auto pixel_step = g.stride * g.in_c;
  for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
    const float* window_row = padded + oy * g.stride * row;
    const float* dy_row = dy + oy * g.out_w * g.out_c;
    for (std::int64_t ox = 0; ox < g.out_w; ++ox) {
      const float* window = window_row + ox * pixel_step;
      Eight d[kHalves];
      for (int h = 0; h < kHalves; ++h) {
        load(d[h], dy_row + ox * g.out_c + 8 * h);
      }
      for (int t = 0; t < Taps; ++t) {
        const float v = window[at[t]];
        for (int h = 0; h < kHalves; ++h) {
          acc[t][h] += v * d[h];
        }
      }
    }
  }
  for (int t = 0; t < Taps; ++t) {
    for (int h = 0; h < kHalves; ++h) {
      float* target = dw + (p + t) * g.out_c + 8 * h;
      Eight sum;
      load(sum, target);
      sum += acc[t][h];
      store(target, sum);
    }
  }
}

}  // namespace

bool direct_applies(const ConvGeometry& g) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  static const bool vector_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  constexpr bool vector_fma = false;  // not measured elsewhere: the GEMM path
#endif
  return vector_fma && g.kernel * g.kernel * g.in_c <= kDirectPatchMax && g.out_c > 0 &&
         g.out_c % kDirectChannelBlock == 0 && g.stride > 0;
}

void pad_sample(const float* in, float* padded, const ConvGeometry& g) {
  std::fill_n(padded, g.padded_size(), 0.0f);
  const auto row = g.in_w * g.in_c;
  for (std::int64_t y = 0; y < g.in_h; ++y) {
    std::copy_n(in + y * row, row, padded + ((y + g.padding) * g.padded_w() + g.padding) * g.in_c);
  }
}

FEDCORE_DISPATCH
void conv_direct_forward(const float* padded, const float* weights, const float* bias, float* out,
                         const ConvGeometry& g) {
  const TapOffsets taps = tap_offsets(g);
  const auto row = g.padded_w() * g.in_c;
  const auto pixel_step = g.stride * g.in_c;
  for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
    const float* window_row = padded + oy * g.stride * row;
    float* out_row = out + oy * g.out_w * g.out_c;
    for (std::int64_t cb = 0; cb < g.out_c; cb += kBlock) {
      const float* block_bias = bias != nullptr ? bias + cb : nullptr;
      std::int64_t ox = 0;
      for (; ox + kLanes <= g.out_w; ox += kLanes) {
        forward_pixels<kLanes>(window_row + ox * pixel_step, pixel_step, weights + cb, block_bias,
                               out_row + ox * g.out_c + cb, g.out_c, taps);
      }
      for (; ox < g.out_w; ++ox) {
        forward_pixels<1>(window_row + ox * pixel_step, pixel_step, weights + cb, block_bias,
                          out_row + ox * g.out_c + cb, g.out_c, taps);
      }
    }
  }
}

FEDCORE_DISPATCH
void conv_direct_weight_gradient(const float* padded, const float* dy, float* dw, float* db,
                                 const ConvGeometry& g) {
  const TapOffsets taps = tap_offsets(g);
  for (std::int64_t cb = 0; cb < g.out_c; cb += kBlock) {
    std::int64_t p = 0;
    for (; p + kLanes <= taps.count; p += kLanes) {
      gradient_taps<kLanes>(padded, dy + cb, dw + cb, p, taps, g);
    }
    for (; p < taps.count; ++p) {
      gradient_taps<1>(padded, dy + cb, dw + cb, p, taps, g);
    }
  }
  if (db != nullptr) {
    const auto pixels = g.out_h * g.out_w;
    for (std::int64_t i = 0; i < pixels; ++i) {
      for (std::int64_t c = 0; c < g.out_c; ++c) {
        db[c] += dy[i * g.out_c + c];
      }
    }
  }
}

}  // namespace fedcore::model::kernels
