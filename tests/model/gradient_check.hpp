// Finite-difference checks for layers and losses (docs/engineering.md, habit 10).
//
// The scalar objective is L = sum(R .* forward(X)) for a fixed random R, so dL/dY = R.
// Analytic gradients come from backward(R) (input) and gradient(R) (parameters); numeric
// ones from central differences (L(x + h) - L(x - h)) / 2h, accumulated in double.
//
// Tolerance: float32 central differences with h = 1e-2 have truncation error O(h^2) and
// rounding error about 1e-7 |L| / h; on our small problems both stay below 1e-3 of the
// gradient norm. We require ||analytic - numeric|| / (||analytic|| + ||numeric||) <= 5e-3.
#pragma once

#include <cmath>

#include <gtest/gtest.h>

#include "shared/model/layer.hpp"
#include "shared/model/model.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::model::testing {

inline constexpr double kGradientTolerance = 5e-3;
inline constexpr float kStep = 1e-2f;

inline Matrix random_matrix(Eigen::Index rows, Eigen::Index cols, Rng& rng, float scale = 1.0f) {
  Matrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    m.data()[i] = scale * (2.0f * rng.uniform_float() - 1.0f);
  }
  return m;
}

inline double objective(Layer& layer, const Matrix& x, const Matrix& r) {
  Matrix y;
  layer.forward(x, y, Phase::train);
  double sum = 0;
  for (Eigen::Index i = 0; i < y.size(); ++i) {
    sum += double(y.data()[i]) * r.data()[i];
  }
  return sum;
}

inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, na = 0, nb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  const double denominator = std::sqrt(na) + std::sqrt(nb);
  return denominator == 0 ? 0 : std::sqrt(diff) / denominator;
}

// Checks d L / d input of `layer` at `x`.
inline void expect_input_gradient_matches(Layer& layer, Matrix x, std::uint64_t seed = 7) {
  Rng rng(seed);
  Matrix y;
  layer.forward(x, y, Phase::train);
  const Matrix r = random_matrix(y.rows(), y.cols(), rng);
  Matrix dx;
  layer.backward(x, y, r, dx);
  ASSERT_EQ(dx.rows(), x.rows());
  ASSERT_EQ(dx.cols(), x.cols());
  std::vector<double> analytic, numeric;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const float saved = x.data()[i];
    x.data()[i] = saved + kStep;
    const double plus = objective(layer, x, r);
    x.data()[i] = saved - kStep;
    const double minus = objective(layer, x, r);
    x.data()[i] = saved;
    numeric.push_back((plus - minus) / (2.0 * kStep));
    analytic.push_back(dx.data()[i]);
  }
  EXPECT_LE(relative_error(analytic, numeric), kGradientTolerance)
      << layer.kind() << " input gradient";
}

// Checks d L / d params of `layer` (bound to `params`/`grads`) at `x`.
inline void expect_param_gradient_matches(Layer& layer, std::span<float> params,
                                          std::span<float> grads, const Matrix& x,
                                          std::uint64_t seed = 11) {
  Rng rng(seed);
  Matrix y;
  layer.forward(x, y, Phase::train);
  const Matrix r = random_matrix(y.rows(), y.cols(), rng);
  layer.gradient(x, r);
  std::vector<double> analytic(grads.begin(), grads.end()), numeric;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float saved = params[i];
    params[i] = saved + kStep;
    const double plus = objective(layer, x, r);
    params[i] = saved - kStep;
    const double minus = objective(layer, x, r);
    params[i] = saved;
    numeric.push_back((plus - minus) / (2.0 * kStep));
  }
  EXPECT_LE(relative_error(analytic, numeric), kGradientTolerance)
      << layer.kind() << " parameter gradient";
}

// A layer bound to its own buffers, for tests.
struct BoundLayer {
  std::unique_ptr<Layer> layer;
  std::vector<float> params;
  std::vector<float> grads;

  explicit BoundLayer(std::unique_ptr<Layer> l, std::uint64_t seed = 3) : layer(std::move(l)) {
    std::size_t n = 0;
    for (const auto& p : layer->param_shapes()) {
      n += element_count(p.shape);
    }
    params.assign(n, 0.0f);
    grads.assign(n, 0.0f);
    layer->bind(params, grads);
    Rng rng(seed);
    layer->initialize(rng);
  }
};

}  // namespace fedcore::model::testing
