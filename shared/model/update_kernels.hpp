// The loops of our own code whose speed follows the instruction set: the element-wise
// parameter updates of the optimizers (optimizer.cpp), ReLU's backward pass and max
// pooling's forward pass (layers), as plain loops the caller can split across threads.
//
// Run-time dispatch: in a portable build (FEDCORE_ARCH x86-64, -v2 or -v3, with GCC on
// x86-64) each kernel is compiled several times — for the build's baseline, for AVX2+FMA
// (x86-64-v3) and for AVX-512 (x86-64-v4) — and the loader picks the best one the CPU
// running the program has (GCC target_clones, an ifunc). docs/results.md ("CPU targets")
// has the profiles that picked these loops; the large matrix products go to OpenBLAS,
// which dispatches by itself.
//
// Every clone computes bit for bit the same values, so a run's numbers do not depend on
// the CPU it lands on: the loops are element-wise (no reductions to reorder) and the file
// is compiled with -ffp-contract=off (no a*b+c fused into one FMA rounding).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fedcore::model::kernels {

// p -= lr * (g + wd * p)
void sgd(float* p, const float* g, std::size_t begin, std::size_t end, float lr, float wd);

// d = g + wd * p; v = dampening_first * mu * v + d; p -= lr * (nesterov ? d + mu * v : v)
void sgd_momentum(float* p, const float* g, float* v, std::size_t begin, std::size_t end, float lr,
                  float wd, float mu, float dampening_first, bool nesterov);

// d = g + wd * p; m = b1 m + (1 - b1) d; s = b2 s + (1 - b2) d^2;
// p -= step_size * m / (sqrt(s) / bias2_sqrt + eps)
void adam(float* p, const float* g, float* m, float* s, std::size_t begin, std::size_t end,
          float step_size, float wd, float b1, float b2, float bias2_sqrt, float eps);

// dx = y > 0 ? dy : 0 over [begin, end) (ReLU's derivative at 0 is taken as 0).
void relu_backward(const float* y, const float* dy, float* dx, std::size_t begin, std::size_t end);

// The shape of one max-pooling pass over an HWC image (no padding).
struct PoolGeometry {
  std::int64_t in_w = 0;
  std::int64_t out_h = 0;
  std::int64_t out_w = 0;
  std::int64_t channels = 0;
  std::int64_t kernel = 0;
  std::int64_t stride = 0;
};

// One sample: out[oy, ox, c] = max over the window, argmax[...] = the input index of the
// first maximum (a NaN wins and propagates).
void max_pool_sample(const float* in, float* out, std::int32_t* argmax, const PoolGeometry& g);

// Which instruction set the dispatched kernels run with on this CPU: "x86-64-v4",
// "x86-64-v3" or "baseline" (also when the build has no dispatch).
const char* dispatched_level() noexcept;

}  // namespace fedcore::model::kernels
