// The product both gemm kernels compute, written once for the Eigen each file is compiled
// with (gemm.cpp: the build's; gemm_avx512.cpp: its renamed AVX-512 copy, which includes
// "shared/util/eigen.hpp" under the new name first).
#pragma once

#include "shared/model/gemm.hpp"
#include "shared/util/eigen.hpp"

namespace fedcore::model::gemm::detail {

// Columns [first, first + count) of out = op(a) * op(b): op(b)'s columns are a block of b's
// columns, or of its rows when b is stored transposed.
template <class Matrix>
void eigen_product(const Operand& a, const Operand& b, float* out, std::int64_t first,
                   std::int64_t count) {
  const Eigen::Map<const Matrix> ma(a.data, a.rows, a.cols);
  const Eigen::Map<const Matrix> mb(b.data, b.rows, b.cols);
  const auto rows = a.transposed ? a.cols : a.rows;
  Eigen::Map<Matrix> result(out + first * rows, rows, count);
  if (a.transposed && b.transposed) {
    result.noalias() = ma.transpose() * mb.middleRows(first, count).transpose();
  } else if (a.transposed) {
    result.noalias() = ma.transpose() * mb.middleCols(first, count);
  } else if (b.transposed) {
    result.noalias() = ma * mb.middleRows(first, count).transpose();
  } else {
    result.noalias() = ma * mb.middleCols(first, count);
  }
}

// The whole product.
template <class Matrix>
void eigen_product(const Operand& a, const Operand& b, float* out) {
  eigen_product<Matrix>(a, b, out, 0, b.transposed ? b.rows : b.cols);
}

}  // namespace fedcore::model::gemm::detail
