// Direct convolution for layers whose receptive field is small (k * k * cin up to
// kDirectPatchMax floats: the first layer of an image model, one or three input channels).
//
// Why: im2col copies every input value k * k times into columns for a product whose inner
// dimension (the patch, 25 for a 5x5 kernel over one channel) is too short for a GEMM
// kernel to run at speed: the McMahan cnn's first convolution ran at ~27 GFLOP/s of a Zen 4
// core's ~100 (docs/results.md). Here each output pixel's cout values are accumulated in
// vector registers straight from a zero-padded copy of the input sample.
//
// Layouts are Conv2d's: input and output HWC; weights a cout x patch column-major matrix
// (for each tap (ky, kx, ci) the cout values are contiguous), the cout biases after them.
//
// Compiled per instruction set and picked at run time in portable builds, like
// update_kernels.hpp, and taken only on a CPU with AVX2 and FMA (direct_applies): below
// that the GEMM path, on OpenBLAS's own dispatched kernels, is the faster. Unlike the update
// kernels, the sums are reductions and are contracted into FMAs, so results differ between
// CPUs in the last bits, as the GEMM kernels' already do; within one process they never
// change.
#pragma once

#include <cstdint>

namespace fedcore::model::kernels {

// The largest patch (k * k * cin) the direct kernels take, and the output channels they
// need (a multiple of kDirectChannelBlock).
inline constexpr std::int64_t kDirectPatchMax = 32;
inline constexpr std::int64_t kDirectChannelBlock = 16;

struct ConvGeometry {
  std::int64_t in_h = 0, in_w = 0, in_c = 0;
  std::int64_t out_h = 0, out_w = 0, out_c = 0;
  std::int64_t kernel = 0, stride = 1, padding = 0;

  // The zero-padded input sample the kernels read: (in_h + 2p) x (in_w + 2p) x in_c floats.
  std::int64_t padded_h() const noexcept { return in_h + 2 * padding; }
  std::int64_t padded_w() const noexcept { return in_w + 2 * padding; }
  std::int64_t padded_size() const noexcept { return padded_h() * padded_w() * in_c; }
};

// Whether the direct kernels take this geometry on this CPU (AVX2 and FMA).
bool direct_applies(const ConvGeometry& g) noexcept;

// padded = `in` (one HWC sample) inside a border of `padding` zeros; padded holds
// g.padded_size() floats.
void pad_sample(const float* in, float* padded, const ConvGeometry& g);

// One sample: out[oy, ox, :] = bias + sum over (ky, kx, ci) of
// padded[oy * s + ky, ox * s + kx, ci] * weights[(ky, kx, ci), :]. bias may be null.
void conv_direct_forward(const float* padded, const float* weights, const float* bias, float* out,
                         const ConvGeometry& g);

// One sample, added to what dw and db hold: dw[(ky, kx, ci), :] += sum over (oy, ox) of
// padded[oy * s + ky, ox * s + kx, ci] * dy[oy, ox, :]; db[:] += sum of dy[oy, ox, :]
// (db may be null). dw is cout x patch column-major, as the weights.
void conv_direct_weight_gradient(const float* padded, const float* dy, float* dw, float* db,
                                 const ConvGeometry& g);

}  // namespace fedcore::model::kernels
