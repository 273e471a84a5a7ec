#include "shared/model/conv_wide.hpp"

#include <atomic>

#include "shared/util/assert.hpp"

namespace fedcore::model::kernels {
namespace {

bool cpu_runs_avx512_objects() noexcept {
#if defined(FEDCORE_AVX512_OBJECTS)
  static const bool v4 = __builtin_cpu_supports("x86-64-v4");
  return v4;
#else
  return false;  // this build has no x86-64-v4 objects (not GCC, or not x86-64)
#endif
}

std::atomic<bool>& allowed() noexcept {
  static std::atomic<bool> wide{true};
  return wide;
}

}  // namespace

void allow_wide_kernels(bool allowed_now) noexcept {
  allowed().store(allowed_now, std::memory_order_relaxed);
}

bool wide_kernels_allowed() noexcept {
  return allowed().load(std::memory_order_relaxed);
}

bool wide_forward_applies(const ConvGeometry& g) noexcept {
  return cpu_runs_avx512_objects() && wide_kernels_allowed() && g.stride > 0 && g.padding >= 0 &&
         g.in_c > 0 && g.out_c > 0 && g.out_c % kWideChannelBlock == 0 &&
         g.out_h == (g.in_h + 2 * g.padding - g.kernel) / g.stride + 1 &&
         g.out_w == (g.in_w + 2 * g.padding - g.kernel) / g.stride + 1;
}

// The input gradient is a stride-1 convolution of dy padded by kernel - 1 - padding.
bool wide_applies(const ConvGeometry& g) noexcept {
  return wide_forward_applies(g) && g.stride == 1 && g.padding <= g.kernel - 1 &&
         g.in_c % kWideChannelBlock == 0;
}

ConvGeometry input_gradient_geometry(const ConvGeometry& g) noexcept {
  return {g.out_h, g.out_w, g.out_c, g.in_h, g.in_w, g.in_c, g.kernel, 1, g.kernel - 1 - g.padding};
}

void pack_flipped_weights(const float* weights, float* flipped, const ConvGeometry& g) {
  const auto k = g.kernel;
  for (std::int64_t ky = 0; ky < k; ++ky) {
    for (std::int64_t kx = 0; kx < k; ++kx) {
      const float* tap = weights + ((k - 1 - ky) * k + (k - 1 - kx)) * g.in_c * g.out_c;
      float* to = flipped + (ky * k + kx) * g.out_c * g.in_c;
      for (std::int64_t ci = 0; ci < g.in_c; ++ci) {
        for (std::int64_t co = 0; co < g.out_c; ++co) {
          to[co * g.in_c + ci] = tap[ci * g.out_c + co];
        }
      }
    }
  }
}

#if defined(FEDCORE_AVX512_OBJECTS)

void conv_wide_forward(const float* padded, const float* weights, const float* bias, float* out,
                       const ConvGeometry& g) {
  avx512::convolve_plane(padded, g.padded_w(), g.in_c, weights, g.kernel, g.stride, bias, out,
                         g.out_h, g.out_w, g.out_c);
}

void conv_wide_weight_gradient(const float* padded, const float* dy, float* dw, float* db,
                               const ConvGeometry& g) {
  avx512::accumulate_weight_gradient(padded, g.padded_w(), g.in_c, dy, g.out_h, g.out_w, g.out_c,
                                     g.kernel, g.stride, dw, db);
}

// The input gradient of a stride-1 convolution is a convolution of dy padded by
// k - 1 - padding with the flipped, transposed weights: the forward loops serve both.
void conv_wide_input_gradient(const float* padded_dy, const float* flipped, float* dx,
                              const ConvGeometry& g) {
  const ConvGeometry back = input_gradient_geometry(g);
  avx512::convolve_plane(padded_dy, back.padded_w(), back.in_c, flipped, back.kernel, 1, nullptr,
                         dx, back.out_h, back.out_w, back.out_c);
}

#else

// Never called: wide_applies is false in such a build.
void conv_wide_forward(const float*, const float*, const float*, float*, const ConvGeometry&) {
  FEDCORE_ASSERT(false, "conv_wide_forward: no AVX-512 objects in this build");
}
void conv_wide_weight_gradient(const float*, const float*, float*, float*, const ConvGeometry&) {
  FEDCORE_ASSERT(false, "conv_wide_weight_gradient: no AVX-512 objects in this build");
}
void conv_wide_input_gradient(const float*, const float*, float*, const ConvGeometry&) {
  FEDCORE_ASSERT(false, "conv_wide_input_gradient: no AVX-512 objects in this build");
}

#endif

}  // namespace fedcore::model::kernels
