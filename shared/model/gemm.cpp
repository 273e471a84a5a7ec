#include "shared/model/gemm.hpp"

#include <atomic>

#include "shared/model/gemm_product.hpp"
#include "shared/util/assert.hpp"
#include "shared/util/blas_kernels.hpp"
#include "shared/util/eigen.hpp"

namespace fedcore::model::gemm {
namespace {

bool cpu_has_avx512() noexcept {
#if defined(FEDCORE_AVX512_OBJECTS)
  return __builtin_cpu_supports("x86-64-v4");
#else
  return false;
#endif
}

// The AVX-512 kernel when the CPU has it, unless the products already go to one of
// OpenBLAS's AVX-512 cores: those were 3-5% faster on a CNN step here (docs/results.md).
Kernel best_kernel() noexcept {
  return cpu_has_avx512() && !blas_core_uses_avx512() ? Kernel::avx512 : Kernel::standard;
}

// Chosen once, at the first product; a test or benchmark may switch it (use_kernel).
std::atomic<Kernel>& chosen() noexcept {
  static std::atomic<Kernel> kernel{best_kernel()};
  return kernel;
}

}  // namespace

void multiply(const Operand& a, const Operand& b, float* out) {
  FEDCORE_ASSERT((a.transposed ? a.rows : a.cols) == (b.transposed ? b.cols : b.rows),
                 "gemm::multiply: inner dimensions differ");
#if defined(FEDCORE_AVX512_OBJECTS)
  if (chosen().load(std::memory_order_relaxed) == Kernel::avx512) {
    detail::multiply_avx512(a, b, out);
    return;
  }
#endif
  detail::eigen_product<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>>(a, b, out);
}

Kernel active_kernel() noexcept {
  return chosen().load(std::memory_order_relaxed);
}

const char* kernel_name(Kernel kernel) noexcept {
  return kernel == Kernel::avx512 ? "avx512" : "standard";
}

bool available(Kernel kernel) noexcept {
  return kernel == Kernel::standard || cpu_has_avx512();
}

bool use_kernel(Kernel kernel) noexcept {
  if (!available(kernel)) {
    return false;
  }
  chosen().store(kernel, std::memory_order_relaxed);
  return true;
}

}  // namespace fedcore::model::gemm
