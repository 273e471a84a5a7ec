// Eigen's GEMM compiled for x86-64-v4 (this file alone gets -march=x86-64-v4;
// shared/CMakeLists.txt). Called only after cpuid said the CPU has it (conv_gemm.cpp).
//
// Two rules keep AVX-512 code out of the rest of the program:
// - Eigen is renamed for this file. Its templates are instantiated here with AVX-512
//   packets; under the name "Eigen" the linker would be free to keep this file's copy of
//   an inline function for the whole program (one definition rule), and a portable build
//   would then crash on a CPU without AVX-512.
// - This file defines nothing else but multiply_avx512 (tests/model/isa_objects_test.sh).
//
// EIGEN_USE_BLAS is dropped here: the point is Eigen's own kernel, not OpenBLAS's.
#undef EIGEN_USE_BLAS
#define Eigen FedcoreEigenAvx512
#include "shared/util/eigen.hpp"

#include "shared/model/conv_gemm_product.hpp"

namespace fedcore::model::gemm::detail {

void multiply_avx512(const Operand& a, const Operand& b, float* out) {
  eigen_product<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>>(a, b, out);
}

}  // namespace fedcore::model::gemm::detail
