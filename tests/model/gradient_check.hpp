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

// (L(v + h) - L(v - h)) / 2h for one coordinate `v` (an input or a parameter), restored after.
inline double central_difference(Layer& layer, float& v, const Matrix& x, const Matrix& r,
                                 float h = kStep) {
  const float saved = v;
  v = saved + h;
  const double plus = objective(layer, x, r);
  v = saved - h;
  const double minus = objective(layer, x, r);
  v = saved;
  return (plus - minus) / (2.0 * h);
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
    numeric.push_back(central_difference(layer, x.data()[i], x, r));
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
    numeric.push_back(central_difference(layer, params[i], x, r));
  }
  EXPECT_LE(relative_error(analytic, numeric), kGradientTolerance)
      << layer.kind() << " parameter gradient";
}

// For layers made of layers with kinks (ReLU6 after BatchNorm): a perturbation of one
// input moves the batch statistics, and so every pre-activation of its channel, and a
// central difference whose interval straddles a kink measures neither side's slope.
// Such coordinates are found by comparing the difference at h and h/2 (which agree to
// O(h^2) where the objective is smooth) and left out; the rest must match as above, and
// at most `max_kinked` of all coordinates may be left out. `values` are the coordinates
// perturbed (an input matrix or a parameter span), `analytic` their gradient.
//
// Kinks crossed by *other* coordinates (moved O(h / M) through the batch statistics) are too
// small to detect one by one and add up to about 1% on an InvertedResidual of M = 64 values
// per channel, hence kCompositeTolerance: a wiring mistake (a lost residual, a sub-layer's
// gradient applied to the wrong input) shows as an error of order 1, and every sub-layer is
// checked on its own at kGradientTolerance.
inline constexpr double kCompositeTolerance = 2e-2;

inline void expect_gradient_matches_away_from_kinks(Layer& layer, std::span<float> values,
                                                    const std::vector<double>& analytic,
                                                    const Matrix& x, const Matrix& r,
                                                    const char* what, double max_kinked = 0.2) {
  constexpr float kFine = 2e-3f;
  std::vector<double> kept_analytic, kept_numeric;
  std::size_t kinked = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double coarse = central_difference(layer, values[i], x, r, 2 * kFine);
    const double fine = central_difference(layer, values[i], x, r, kFine);
    if (std::abs(coarse - fine) > 0.02 * std::abs(fine) + 2e-3) {
      ++kinked;
      continue;
    }
    kept_numeric.push_back(fine);
    kept_analytic.push_back(analytic[i]);
  }
  EXPECT_LE(double(kinked), max_kinked * double(values.size())) << what << ": too many kinks";
  EXPECT_LE(relative_error(kept_analytic, kept_numeric), kCompositeTolerance) << what;
}

// Input and parameter gradients of a layer with kinks inside (see above).
inline void expect_gradients_match_away_from_kinks(Layer& layer, std::span<float> params,
                                                   std::span<float> grads, Matrix x,
                                                   std::uint64_t seed = 7) {
  Rng rng(seed);
  Matrix y, dx;
  layer.forward(x, y, Phase::train);
  const Matrix r = random_matrix(y.rows(), y.cols(), rng);
  layer.backward(x, y, r, dx);
  layer.forward(x, y, Phase::train);
  layer.gradient(x, r);
  const std::vector<double> input_grad(dx.data(), dx.data() + dx.size());
  const std::vector<double> param_grad(grads.begin(), grads.end());
  Matrix perturbed = x;
  expect_gradient_matches_away_from_kinks(
      layer, {perturbed.data(), static_cast<std::size_t>(perturbed.size())}, input_grad, perturbed,
      r, "input gradient");
  expect_gradient_matches_away_from_kinks(layer, params, param_grad, x, r, "parameter gradient");
}

// A layer bound to its own buffers (parameters, gradients, state), for tests.
struct BoundLayer {
  std::unique_ptr<Layer> layer;
  std::vector<float> params;
  std::vector<float> grads;
  std::vector<float> state;

  explicit BoundLayer(std::unique_ptr<Layer> l, std::uint64_t seed = 3) : layer(std::move(l)) {
    std::size_t n = 0;
    for (const auto& p : layer->param_shapes()) {
      n += element_count(p.shape);
    }
    std::size_t s = 0;
    for (const auto& p : layer->state_shapes()) {
      s += element_count(p.shape);
    }
    params.assign(n, 0.0f);
    grads.assign(n, 0.0f);
    state.assign(s, 0.0f);
    layer->bind(params, grads);
    layer->bind_state(state);
    Rng rng(seed);
    layer->initialize(rng);
  }
};

}  // namespace fedcore::model::testing
