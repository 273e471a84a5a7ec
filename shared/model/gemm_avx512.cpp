// Eigen's GEMM compiled for x86-64-v4 (this file alone gets -march=x86-64-v4;
// shared/CMakeLists.txt). Called only after cpuid said the CPU has it (gemm.cpp).
//
// Two rules keep AVX-512 code out of the rest of the program:
// - Eigen is renamed for this file. Its templates are instantiated here with AVX-512
//   packets; under the name "Eigen" the linker would be free to keep this file's copy of
//   an inline function for the whole program (one definition rule), and a portable build
//   would then crash on a CPU without AVX-512.
// - This file defines nothing else but multiply_avx512 (tests/model/isa_objects_test.sh).
//
// EIGEN_USE_BLAS is dropped here: the point is Eigen's own kernel, not OpenBLAS's. Eigen's
// own threading is off too: its rule (a thread per 50,000 multiply-adds) forked 2 threads
// for logreg's 10x784x32 product and halved that step's speed; this file splits the
// output's columns itself, at a threshold measured on the zoo's models.
#undef EIGEN_USE_BLAS
#define EIGEN_DONT_PARALLELIZE
#define Eigen FedcoreEigenAvx512
#include <algorithm>
#include <omp.h>

#include "shared/model/gemm_product.hpp"
#include "shared/util/eigen.hpp"

namespace fedcore::model::gemm::detail {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;

// Multiply-adds a thread must get before a second one is worth its fork and join (~5 us):
// 2M is about 20 us of one core's AVX-512 GEMM.
constexpr double kMinWorkPerThread = 2e6;
// Fewer output columns than this per thread and the kernel's 4-column panels go to waste.
constexpr std::int64_t kMinColumnsPerThread = 16;

int threads_for(std::int64_t rows, std::int64_t depth, std::int64_t cols) {
  if (omp_in_parallel()) {
    return 1;
  }
  const double work =
      static_cast<double>(rows) * static_cast<double>(depth) * static_cast<double>(cols);
  const auto by_work = static_cast<std::int64_t>(work / kMinWorkPerThread);
  const auto by_columns = cols / kMinColumnsPerThread;
  return static_cast<int>(
      std::clamp<std::int64_t>(std::min(by_work, by_columns), 1, omp_get_max_threads()));
}

}  // namespace

void multiply_avx512(const Operand& a, const Operand& b, float* out) {
  const auto rows = a.transposed ? a.cols : a.rows;
  const auto depth = a.transposed ? a.rows : a.cols;
  const auto cols = b.transposed ? b.rows : b.cols;
  const int threads = threads_for(rows, depth, cols);
  if (threads == 1) {
    eigen_product<Matrix>(a, b, out);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const auto first = cols * t / threads;
    const auto last = cols * (t + 1) / threads;
    eigen_product<Matrix>(a, b, out, first, last - first);
  }
}

}  // namespace fedcore::model::gemm::detail
