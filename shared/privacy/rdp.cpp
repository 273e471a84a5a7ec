#include "shared/privacy/rdp.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

namespace fedcore::privacy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The fractional-order series stops once both new terms are below e^-30 (as the
// reference implementations do). Its terms decay polynomially, so this many terms is
// far more than any order in orders_D/T/O needs; past it we answer +inf (conservative).
constexpr int kMaxSeriesTerms = 1'000'000;

// log(e^a + e^b), exact at -inf.
double log_add(double a, double b) noexcept {
  const double lo = std::min(a, b);
  const double hi = std::max(a, b);
  if (lo == kNegInf) {
    return hi;
  }
  return hi + std::log1p(std::exp(lo - hi));
}

// log(e^a - e^b) for a >= b; false if a < b (the caller's sum went negative).
bool log_sub(double a, double b, double& out) noexcept {
  if (a < b) {
    return false;
  }
  if (b == kNegInf) {
    out = a;
    return true;
  }
  if (a == b) {
    out = kNegInf;
    return true;
  }
  // e^a - e^b = e^a (1 - e^(b-a)); log(-expm1(x)) is accurate for x near 0.
  out = a + std::log(-std::expm1(b - a));
  return true;
}

// log(erfc(x)), accurate in the far right tail where erfc underflows.
double log_erfc(double x) noexcept {
  if (x < 26.0) {
    return std::log(std::erfc(x));
  }
  // Asymptotic (Laurent) expansion at +inf:
  //   log erfc(x) = -x² - log x - log(π)/2 - 1/(2x²) + 5/(8x⁴) - 37/(24x⁶) + 353/(64x⁸) - ...
  // At x >= 26 the first omitted term is below 1e-12.
  const double inv2 = 1.0 / (x * x);
  return -x * x - std::log(x) - 0.5 * std::log(std::numbers::pi) - 0.5 * inv2 +
         0.625 * inv2 * inv2 - 37.0 / 24.0 * inv2 * inv2 * inv2 +
         353.0 / 64.0 * inv2 * inv2 * inv2 * inv2;
}

double log_binomial(double n, double k) noexcept {
  return std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1);
}

bool is_integer_order(double order) noexcept {
  return order == std::floor(order) && order < 9007199254740992.0;  // 2^53
}

// log A_α for integer α (MTZ19 §3.2): A_α = Σ_i C(α,i) q^i (1-q)^(α-i) e^((i²-i)/(2σ²)).
double log_a_integer(double q, double sigma, long alpha) noexcept {
  const double log_q = std::log(q);
  const double log_1mq = std::log1p(-q);
  double log_a = kNegInf;
  for (long i = 0; i <= alpha; ++i) {
    const double di = static_cast<double>(i);
    const double term = log_binomial(static_cast<double>(alpha), di) + di * log_q +
                        static_cast<double>(alpha - i) * log_1mq +
                        (di * di - di) / (2 * sigma * sigma);
    log_a = log_add(log_a, term);
  }
  return log_a;
}

// log A_α for fractional α (MTZ19 §3.3): A_α splits at z0 = σ² log(1/q - 1) + 1/2 into
// the integrals over (-inf, z0] and [z0, +inf); each is a convergent series in the
// generalised binomial coefficients C(α, i), whose signs alternate from i = 3 on, with
// Gaussian tail factors erfc(...)/2. Returns +inf if a partial sum would turn negative (it
// cannot in exact arithmetic) or the series has not converged after kMaxSeriesTerms.
double log_a_fractional(double q, double sigma, double alpha) noexcept {
  const double log_q = std::log(q);
  const double log_1mq = std::log1p(-q);
  const double z0 = sigma * sigma * std::log(1 / q - 1) + 0.5;
  const double two_sigma2 = 2 * sigma * sigma;
  const double sqrt2_sigma = std::numbers::sqrt2 * sigma;

  double log_a0 = kNegInf;
  double log_a1 = kNegInf;
  double log_abs_coef = 0;  // C(α, 0) = 1
  bool coef_positive = true;
  for (int i = 0; i < kMaxSeriesTerms; ++i) {
    const double di = i;
    const double j = alpha - di;
    const double log_t0 = log_abs_coef + di * log_q + j * log_1mq;
    const double log_t1 = log_abs_coef + j * log_q + di * log_1mq;
    const double log_e0 = std::log(0.5) + log_erfc((di - z0) / sqrt2_sigma);
    const double log_e1 = std::log(0.5) + log_erfc((z0 - j) / sqrt2_sigma);
    const double log_s0 = log_t0 + (di * di - di) / two_sigma2 + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / two_sigma2 + log_e1;
    if (coef_positive) {
      log_a0 = log_add(log_a0, log_s0);
      log_a1 = log_add(log_a1, log_s1);
    } else if (!log_sub(log_a0, log_s0, log_a0) || !log_sub(log_a1, log_s1, log_a1)) {
      return kInf;
    }
    // Stop only past i = (α-1)/2: from there on both sequences of terms shrink (|C(α,i)|
    // decreases and the other factor is a moment of a ratio below 1), so a term below
    // e^-30 means the rest is negligible. Before it the terms can still grow: at large
    // fractional orders (above about 43) the first terms can both be below e^-30 while the
    // bulk of the sum lies ahead. tensorflow/privacy and dp_accounting stop at the first
    // such term and return a wrong (even negative) RDP there; none of orders_D/T/O has a
    // fractional order that large.
    if (di > (alpha - 1) / 2 && std::max(log_s0, log_s1) < -30) {
      return log_add(log_a0, log_a1);
    }
    // C(α, i+1) = C(α, i) (α - i) / (i + 1); α is not an integer, so α - i != 0.
    log_abs_coef += std::log(std::abs(alpha - di)) - std::log(di + 1);
    if (alpha - di < 0) {
      coef_positive = !coef_positive;
    }
  }
  return kInf;
}

result<void> check_arguments(double q, double noise_multiplier, double order) {
  if (!(q >= 0 && q <= 1)) {
    return fail(errc::invalid_argument,
                "sampling ratio q = " + std::to_string(q) + " is not in [0, 1]");
  }
  if (!(noise_multiplier >= 0)) {
    return fail(errc::invalid_argument,
                "noise multiplier " + std::to_string(noise_multiplier) + " is negative or NaN");
  }
  if (!(order > 1)) {
    return fail(errc::invalid_argument,
                "RDP order " + std::to_string(order) + " is not greater than 1");
  }
  return {};
}

// log |Δ^k h(0)| for k = 0..max_k, where h(m) = exp(cgf(m-1)) and
// cgf(x) = x (x+1) / (2σ²) is the Gaussian's cumulant at x (so h(0) = h(1) = 1), and
// Δ^k h(0) = Σ_m (-1)^(k-m) C(k,m) h(m). The alternating sum cancels badly when h is
// flat (large σ), so each value is rounded UP by a bound on its floating-point error,
// (k + 8)·4·2^-52 times the sum of the magnitudes: a tiny difference lost to rounding
// then shows as its error bound, never as zero, and the bound stays an upper bound.
std::vector<double> log_abs_forward_differences(double sigma, long max_k) {
  std::vector<double> log_h(static_cast<std::size_t>(max_k) + 1);
  for (long m = 0; m <= max_k; ++m) {
    const double x = static_cast<double>(m - 1);
    log_h[static_cast<std::size_t>(m)] = x * (x + 1) / (2 * sigma * sigma);
  }
  std::vector<double> out(static_cast<std::size_t>(max_k) + 1);
  for (long k = 0; k <= max_k; ++k) {
    double log_pos = kNegInf;
    double log_neg = kNegInf;
    for (long m = 0; m <= k; ++m) {
      const double t = log_binomial(static_cast<double>(k), static_cast<double>(m)) +
                       log_h[static_cast<std::size_t>(m)];
      if ((k - m) % 2 == 0) {
        log_pos = log_add(log_pos, t);
      } else {
        log_neg = log_add(log_neg, t);
      }
    }
    const double top = std::max(log_pos, log_neg);
    const double pos = std::exp(log_pos - top);
    const double neg = std::exp(log_neg - top);
    const double slack = static_cast<double>(k + 8) * 4 * std::numeric_limits<double>::epsilon();
    out[static_cast<std::size_t>(k)] = top + std::log(std::abs(pos - neg) + (pos + neg) * slack);
  }
  return out;
}

// log A_α of WBK19 for integer α >= 2 (so the RDP is this over α - 1):
//   A_α <= 1 + q² C(α,2) min(4 (e^ε(2) - 1), 2 e^ε(2))
//            + Σ_{j=3..α} q^j C(α,j) min(4 sqrt(|Δ^{2⌊j/2⌋} h(0)| |Δ^{2⌈j/2⌉} h(0)|),
//                                          2 e^((j-1) ε(j)))
// with ε(x) = x/(2σ²) the Gaussian's RDP (Theorem 9, whose j >= 3 terms are the second
// argument of the min, tightened for the Gaussian by Theorem 27, the first). As in
// dp_accounting, orders above 256 use the Theorem 9 terms only (the differences cost
// O(α²) and do not help there).
double log_a_without_replacement(double q, double sigma, long alpha) {
  constexpr long kMaxExactOrder = 256;
  const double log_q = std::log(q);
  const double eps2 = 2.0 / (2 * sigma * sigma);
  auto cgf = [sigma](double x) { return x * (x + 1) / (2 * sigma * sigma); };

  double log_a = 0;  // the leading 1
  const double term2 =
      std::min(std::log(4.0) + eps2 + std::log(-std::expm1(-eps2)), eps2 + std::log(2.0));
  log_a = log_add(log_a, 2 * log_q + log_binomial(static_cast<double>(alpha), 2) + term2);

  std::vector<double> diffs;
  if (alpha <= kMaxExactOrder) {
    diffs = log_abs_forward_differences(sigma, alpha + 1);
  }
  for (long j = 3; j <= alpha; ++j) {
    const double dj = static_cast<double>(j);
    double s = std::log(2.0) + cgf(dj - 1);
    if (!diffs.empty()) {
      const auto lo = static_cast<std::size_t>(2 * (j / 2));
      const auto hi = static_cast<std::size_t>(2 * ((j + 1) / 2));
      s = std::min(s, std::log(4.0) + 0.5 * (diffs[lo] + diffs[hi]));
    }
    log_a = log_add(log_a, s + dj * log_q + log_binomial(static_cast<double>(alpha), dj));
  }
  return log_a;
}

}  // namespace

result<double> rdp_poisson_gaussian(double q, double noise_multiplier, double order) {
  if (auto ok = check_arguments(q, noise_multiplier, order); !ok) {
    return ok.error();
  }
  if (q == 0) {
    return 0.0;
  }
  if (std::isinf(order) || noise_multiplier == 0) {
    return kInf;
  }
  if (q == 1) {
    return order / (2 * noise_multiplier * noise_multiplier);
  }
  const double log_a = is_integer_order(order)
                           ? log_a_integer(q, noise_multiplier, static_cast<long>(order))
                           : log_a_fractional(q, noise_multiplier, order);
  return log_a / (order - 1);
}

result<double> rdp_fixed_size_gaussian(double q, double noise_multiplier, double order) {
  if (auto ok = check_arguments(q, noise_multiplier, order); !ok) {
    return ok.error();
  }
  if (q == 0) {
    return 0.0;
  }
  if (std::isinf(order) || noise_multiplier == 0 || !is_integer_order(order)) {
    return kInf;
  }
  if (q == 1) {
    return order / (2 * noise_multiplier * noise_multiplier);
  }
  // Sampling cannot cost more than the unsampled Gaussian (couple the two samples on the
  // same indices; exp((α-1) D_α) is jointly convex), so take that minimum too.
  const double bound =
      log_a_without_replacement(q, noise_multiplier, static_cast<long>(order)) / (order - 1);
  return std::min(bound, order / (2 * noise_multiplier * noise_multiplier));
}

}  // namespace fedcore::privacy
