// Direct convolution on AVX-512 for layers whose output channels are a multiple of 16:
// forward and weight gradient at any stride whatever the input channels, and the input
// gradient too at stride 1 when those are a multiple of 16 (the McMahan cnn's second
// convolution, 5x5 over 32 channels into 64, takes all three; its first, over one channel,
// a CIFAR cnn's first, over three, and strided layers take the first two).
//
// Why: the second layer's im2col product (64 x 800 times 800 x pixels) already runs near a
// core's peak in OpenBLAS or Eigen, but im2col, its column matrix's trip through the cache
// and col2im cost a quarter of the layer on top (docs/results.md, "A direct kernel for the
// cnn's second convolution"); a first layer's columns are too short for a GEMM to run at
// speed at all. Here every output pixel's channels are accumulated in registers straight
// from a zero-padded copy of the sample: 14 pixels x 32 channels in 28 of AVX-512's 32
// registers, the weights of one tap in two more, the input broadcast from memory: at a
// core's FMA peak.
//
// All three passes are convolutions over a padded plane:
// - forward: the padded input with the weights as they lie ((ky, kx, ci) -> cout
//   contiguous: Conv2d's cout x patch column-major matrix);
// - input gradient: dy padded by k - 1 - padding with the weights flipped in space and
//   transposed in channels ((ky', kx', co) -> cin contiguous; pack_flipped_weights);
// - weight gradient: for 16 consecutive taps of a kernel row at once, the input under each
//   pixel's window times that pixel's dy, summed over the pixels.
//
// The loops are compiled for x86-64-v4 in a file of their own (conv_wide_avx512.cpp, like
// gemm_avx512.cpp) and taken only when the CPU has it (wide_*_applies); elsewhere Conv2d keeps
// its other paths. Sums are contracted into FMAs and ordered by tap, not as a GEMM orders
// them: results differ from the product's in the last bits, and never depend on the thread
// count.
#pragma once

#include <cstdint>

#include "shared/model/conv_direct.hpp"

namespace fedcore::model::kernels {

// The channel multiple the wide kernels need: out_c always, in_c for the input gradient.
inline constexpr std::int64_t kWideChannelBlock = 16;

// Whether conv_wide_forward and conv_wide_weight_gradient take this geometry on this CPU:
// x86-64-v4 (and a build that has the AVX-512 objects), out_c a multiple of
// kWideChannelBlock, any stride.
bool wide_forward_applies(const ConvGeometry& g) noexcept;
// Whether all three passes do: wide_forward_applies, stride 1, padding at most kernel - 1,
// and in_c a multiple of kWideChannelBlock too.
bool wide_applies(const ConvGeometry& g) noexcept;

// For benchmarks that emulate a CPU without AVX-512: false makes wide_*_applies say no for
// the layers built afterwards. On by default. Not for use while layers are being built on other
// threads.
void allow_wide_kernels(bool allowed) noexcept;
bool wide_kernels_allowed() noexcept;

// One sample: out[oy, ox, :] = bias + sum over (ky, kx, ci) of
// padded[oy * s + ky, ox * s + kx, ci] * weights[(ky, kx, ci), :] (bias may be null). padded
// is pad_sample's copy of the input.
void conv_wide_forward(const float* padded, const float* weights, const float* bias, float* out,
                       const ConvGeometry& g);

// One sample, added to what dw and db hold: dw[(ky, kx, ci), :] += sum over (oy, ox) of
// padded[oy * s + ky, ox * s + kx, ci] * dy[oy, ox, :]; db[:] += sum of dy[oy, ox, :] (db
// may be null).
void conv_wide_weight_gradient(const float* padded, const float* dy, float* dw, float* db,
                               const ConvGeometry& g);

// The geometry of the input gradient's convolution: dy (out_h x out_w x out_c) padded by
// kernel - 1 - padding, producing in_h x in_w x in_c.
ConvGeometry input_gradient_geometry(const ConvGeometry& g) noexcept;

// flipped[(ky', kx', co), ci] = weights[(k-1-ky', k-1-kx', ci), co]: kernel * kernel *
// out_c * in_c floats, the input gradient's weights (in_c contiguous per tap).
void pack_flipped_weights(const float* weights, float* flipped, const ConvGeometry& g);

// One sample's input gradient: dx[iy, ix, :] = sum over (ky, kx, co) of
// padded_dy[iy + ky, ix + kx, co] * flipped[(ky, kx, co), :], where padded_dy is
// pad_sample(dy, input_gradient_geometry(g)). Overwrites dx (in_h x in_w x in_c).
void conv_wide_input_gradient(const float* padded_dy, const float* flipped, float* dx,
                              const ConvGeometry& g);

namespace avx512 {
// The x86-64-v4 loops (conv_wide_avx512.cpp); only called after wide_*_applies. A plane
// convolution: out (out_h x out_w x out_c) = bias + the k x k window of `in` (a padded
// in_w-wide plane of in_c channels) at every stride-th pixel times weights (tap-major, out_c
// contiguous).
void convolve_plane(const float* in, std::int64_t in_w, std::int64_t in_c, const float* weights,
                    std::int64_t kernel, std::int64_t stride, const float* bias, float* out,
                    std::int64_t out_h, std::int64_t out_w, std::int64_t out_c);
// dw (tap-major, out_c contiguous) += the windows of `in` times dy, summed over out_h x
// out_w pixels; db += dy summed over the pixels when not null.
void accumulate_weight_gradient(const float* in, std::int64_t in_w, std::int64_t in_c,
                                const float* dy, std::int64_t out_h, std::int64_t out_w,
                                std::int64_t out_c, std::int64_t kernel, std::int64_t stride,
                                float* dw, float* db);
}  // namespace avx512

}  // namespace fedcore::model::kernels
