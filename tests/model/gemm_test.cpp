#include "shared/model/gemm.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/util/blas_kernels.hpp"
#include "shared/util/eigen.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::model::gemm {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;

Matrix random_matrix(Eigen::Index rows, Eigen::Index cols, Rng& rng) {
  Matrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    m.data()[i] = static_cast<float>(rng.uniform_double() * 2 - 1);
  }
  return m;
}

// Restores the kernel a test switched.
struct KernelGuard {
  Kernel before = active_kernel();
  ~KernelGuard() { use_kernel(before); }
};

// op(a) * op(b) through multiply, with the stored operand the transpose of the logical one
// when asked.
Matrix product(const Matrix& a, bool ta, const Matrix& b, bool tb) {
  const Matrix sa = ta ? Matrix(a.transpose()) : a;
  const Matrix sb = tb ? Matrix(b.transpose()) : b;
  Matrix out(a.rows(), b.cols());
  out.setConstant(-12345.0f);
  multiply({sa.data(), sa.rows(), sa.cols(), ta}, {sb.data(), sb.rows(), sb.cols(), tb},
           out.data());
  return out;
}

// Every kernel this CPU has computes the product of double-precision arithmetic to float
// rounding, for the conv's shapes and for odd sizes that leave tails in every blocking.
TEST(Gemm, EveryAvailableKernelComputesTheProductInEveryTransposition) {
  KernelGuard guard;
  Rng rng(11);
  const struct {
    Eigen::Index m, k, n;
  } shapes[] = {{64, 800, 588}, {800, 64, 588}, {64, 588, 800}, {32, 25, 2352},
                {7, 13, 5},     {1, 1, 1},      {33, 17, 97},   {49, 300, 3}};
  for (const auto kernel : {Kernel::standard, Kernel::avx512}) {
    if (!use_kernel(kernel)) {
      continue;
    }
    ASSERT_EQ(active_kernel(), kernel);
    for (const auto& s : shapes) {
      const Matrix a = random_matrix(s.m, s.k, rng);
      const Matrix b = random_matrix(s.k, s.n, rng);
      const Eigen::MatrixXd exact = a.cast<double>() * b.cast<double>();
      for (const bool ta : {false, true}) {
        for (const bool tb : {false, true}) {
          const Matrix got = product(a, ta, b, tb);
          const double error = (got.cast<double>() - exact).cwiseAbs().maxCoeff();
          // Each term is below 1 in magnitude: k roundings of float can cost k * 2^-24 each.
          EXPECT_LT(error, 1e-6 * static_cast<double>(s.k) + 1e-6)
              << kernel_name(kernel) << " " << s.m << "x" << s.k << "x" << s.n << " ta=" << ta
              << " tb=" << tb;
        }
      }
    }
  }
}

TEST(Gemm, TheAvx512KernelIsChosenWhenTheCpuHasItAndOpenBlasRunsNoAvx512Core) {
  KernelGuard guard;
  const bool has = __builtin_cpu_supports("x86-64-v4");
#if defined(__GNUC__) && defined(__x86_64__)
  EXPECT_EQ(available(Kernel::avx512), has);
  EXPECT_EQ(guard.before == Kernel::avx512, has && !blas_core_uses_avx512())
      << "OpenBLAS core '" << blas_core_name() << "'";
#endif
  EXPECT_TRUE(available(Kernel::standard));
  EXPECT_EQ(use_kernel(Kernel::avx512), available(Kernel::avx512));
  EXPECT_TRUE(use_kernel(Kernel::standard));
  EXPECT_EQ(active_kernel(), Kernel::standard);
  EXPECT_EQ(std::string(kernel_name(Kernel::avx512)), "avx512");
}

}  // namespace
}  // namespace fedcore::model::gemm
