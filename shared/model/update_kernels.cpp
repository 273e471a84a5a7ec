#include "shared/model/update_kernels.hpp"

#include <cmath>
#include <limits>

#include "shared/model/dispatch.hpp"

namespace fedcore::model::kernels {

FEDCORE_DISPATCH
void sgd(float* __restrict p, const float* __restrict g, std::size_t begin, std::size_t end,
         float lr, float wd) {
  for (std::size_t i = begin; i < end; ++i) {
    p[i] -= lr * (g[i] + wd * p[i]);
  }
}

FEDCORE_DISPATCH
void sgd_momentum(float* __restrict p, const float* __restrict g, float* __restrict v,
                  std::size_t begin, std::size_t end, float lr, float wd, float mu,
                  float dampening_first, bool nesterov) {
  // Two loops rather than a branch per element: each vectorises on its own.
  if (nesterov) {
    for (std::size_t i = begin; i < end; ++i) {
      const float d = g[i] + wd * p[i];
      v[i] = dampening_first * mu * v[i] + d;
      p[i] -= lr * (d + mu * v[i]);
    }
  } else {
    for (std::size_t i = begin; i < end; ++i) {
      const float d = g[i] + wd * p[i];
      v[i] = dampening_first * mu * v[i] + d;
      p[i] -= lr * v[i];
    }
  }
}

FEDCORE_DISPATCH
void adam(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict s,
          std::size_t begin, std::size_t end, float step_size, float wd, float b1, float b2,
          float bias2_sqrt, float eps) {
  for (std::size_t i = begin; i < end; ++i) {
    const float d = g[i] + wd * p[i];
    m[i] = b1 * m[i] + (1.0f - b1) * d;
    s[i] = b2 * s[i] + (1.0f - b2) * d * d;
    p[i] -= step_size * m[i] / (std::sqrt(s[i]) / bias2_sqrt + eps);
  }
}

FEDCORE_DISPATCH
void relu_backward(const float* __restrict y, const float* __restrict dy, float* __restrict dx,
                   std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }
}

FEDCORE_DISPATCH
void max_pool_sample(const float* __restrict in, float* __restrict out,
                     std::int32_t* __restrict argmax, const PoolGeometry& g) {
  for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
    for (std::int64_t ox = 0; ox < g.out_w; ++ox) {
      float* best = out + (oy * g.out_w + ox) * g.channels;
      std::int32_t* best_at = argmax + (oy * g.out_w + ox) * g.channels;
      for (std::int64_t c = 0; c < g.channels; ++c) {
        best[c] = -std::numeric_limits<float>::infinity();
        best_at[c] = -1;
      }
      for (std::int64_t ky = 0; ky < g.kernel; ++ky) {
        for (std::int64_t kx = 0; kx < g.kernel; ++kx) {
          const std::int64_t at = ((oy * g.stride + ky) * g.in_w + ox * g.stride + kx) * g.channels;
          for (std::int64_t c = 0; c < g.channels; ++c) {
            // `!(<=)` so that a NaN input propagates instead of being skipped.
            if (!(in[at + c] <= best[c]) || best_at[c] < 0) {
              best[c] = in[at + c];
              best_at[c] = static_cast<std::int32_t>(at + c);
            }
          }
        }
      }
    }
  }
}

const char* dispatched_level() noexcept {
#if defined(FEDCORE_DISPATCH_CLONES)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) {
    return "x86-64-v4";
  }
  if (__builtin_cpu_supports("x86-64-v3")) {
    return "x86-64-v3";
  }
#endif
  return "baseline";
}

}  // namespace fedcore::model::kernels
