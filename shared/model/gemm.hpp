// The matrix products of the layers' training steps (Conv2d's chunks, Dense), on the
// fastest kernel this CPU has, whatever OpenBLAS was told to use.
//
// Why not always OpenBLAS: Debian's OpenBLAS picks its kernels from OPENBLAS_CORETYPE when
// it is set, and environments pin it (this project's VM sets "Haswell" on an AVX-512 CPU).
// Its AVX2 kernels then run the products at about half the speed the CPU has: 122 against
// 215-232 GFLOP/s on one core for the CNN's conv2 shapes (docs/results.md, "The CNN training
// step against PyTorch"), while PyTorch's oneDNN convolutions keep AVX-512 either way.
//
// So on a CPU with AVX-512 (x86-64-v4: F, BW, CD, DQ, VL) the products run on Eigen's own
// GEMM compiled for AVX-512 in a file of its own (gemm_avx512.cpp), chosen at run time by
// cpuid, unless OpenBLAS already runs one of its AVX-512 cores (3-5% faster still on the
// CNN); elsewhere they go where every other product goes (OpenBLAS, or Eigen at the build's
// instruction set). A portable build (-march=x86-64-v2) gets the AVX-512 products on a CPU
// that has them, and never executes an AVX-512 instruction on one that does not: the
// AVX-512 file's Eigen lives in a namespace of its own, so none of its template code can be
// merged with the baseline's by the linker (tests/model/isa_objects_test.sh checks the
// object file defines nothing else).
//
// Results differ between kernels in the last bits (a sum's order), as they already differ
// between OpenBLAS's cores; within one process the kernel never changes unless a test or
// benchmark asks (use_kernel).
#pragma once

#include <cstdint>

namespace fedcore::model::gemm {

// A column-major matrix stored contiguously (leading dimension = rows), used as itself or
// transposed.
struct Operand {
  const float* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  bool transposed = false;
};

// out = op(a) * op(b); out is column-major, contiguous, op(a).rows x op(b).cols, and must
// not overlap a or b. Single-threaded inside an OpenMP parallel region (Conv2d's chunks are
// then the parallelism); outside one it may use the OpenMP threads when the product is
// large enough to pay for them.
void multiply(const Operand& a, const Operand& b, float* out);

enum class Kernel {
  standard,  // Eigen's product as configured by the build (OpenBLAS when EIGEN_USE_BLAS)
  avx512,    // Eigen's GEMM compiled for x86-64-v4, chosen at run time
};

// The kernel multiply uses now: avx512 when the build has it, the CPU supports it and
// OpenBLAS is not on an AVX-512 core of its own; else standard.
Kernel active_kernel() noexcept;
const char* kernel_name(Kernel kernel) noexcept;
// Whether this build and CPU can run the kernel.
bool available(Kernel kernel) noexcept;
// For tests and benchmarks: makes multiply use the kernel; false (and no change) when it is
// not available. Not for use while products run on other threads.
bool use_kernel(Kernel kernel) noexcept;

namespace detail {
// The AVX-512 product (gemm_avx512.cpp); only called when the CPU has x86-64-v4.
void multiply_avx512(const Operand& a, const Operand& b, float* out);
}  // namespace detail

}  // namespace fedcore::model::gemm
