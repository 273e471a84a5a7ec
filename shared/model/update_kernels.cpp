#include "model/update_kernels.hpp"

#include <cmath>

// FEDCORE_DISPATCH_CLONES is defined by CMake for portable GCC builds on x86-64.
#if defined(FEDCORE_DISPATCH_CLONES)
#define FEDCORE_DISPATCH \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define FEDCORE_DISPATCH
#endif

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
