// The product both conv_gemm kernels compute, written once for the Eigen each file is
// compiled with (conv_gemm.cpp: the build's; conv_gemm_avx512.cpp: its renamed AVX-512 copy).
// Include it after "shared/util/eigen.hpp".
#pragma once

#include "shared/model/conv_gemm.hpp"

namespace fedcore::model::gemm::detail {

template <class Matrix>
void eigen_product(const Operand& a, const Operand& b, float* out) {
  const Eigen::Map<const Matrix> ma(a.data, a.rows, a.cols);
  const Eigen::Map<const Matrix> mb(b.data, b.rows, b.cols);
  Eigen::Map<Matrix> result(out, a.transposed ? a.cols : a.rows, b.transposed ? b.rows : b.cols);
  if (a.transposed && b.transposed) {
    result.noalias() = ma.transpose() * mb.transpose();
  } else if (a.transposed) {
    result.noalias() = ma.transpose() * mb;
  } else if (b.transposed) {
    result.noalias() = ma * mb.transpose();
  } else {
    result.noalias() = ma * mb;
  }
}

}  // namespace fedcore::model::gemm::detail
