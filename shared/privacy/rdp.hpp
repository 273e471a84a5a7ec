// Rényi differential privacy (RDP) of one step of a sampled Gaussian mechanism, order by
// order. The accountant (rdp_accountant.hpp) composes these over steps and converts the
// total to (ε, δ).
//
// The mechanism: a sum of per-record contributions, each clipped to L2 norm C, plus
// N(0, (z·C)²) noise per coordinate, where z is the noise multiplier. Sensitivity is C,
// so every function here takes z alone.
//
// Poisson sampling (add-or-remove-one neighbours): every record is in the batch
// independently with probability q. `rdp_poisson_gaussian` is EXACT, as in Mironov,
// Talwar and Zhang 2019, "Rényi Differential Privacy of the Sampled Gaussian Mechanism":
// for integer orders the binomial expansion of A_α (§3.2), for fractional orders the two
// convergent series of §3.3 (the computation of tensorflow/privacy's
// `_compute_log_a_frac` and dp_accounting's `_compute_log_a_frac`). It is NOT the newer
// conservative upper bound some libraries use for fractional orders. One difference from
// that code: the series stops only once its terms shrink (see rdp.cpp), which fixes wrong,
// even negative, values at fractional orders above about 43. Special cases: q = 0 gives 0
// at every order (the data is never looked at), q = 1 gives the unsampled Gaussian
// α/(2z²), order +inf or z = 0 give +inf (for q > 0). Tests: published values and
// quadrature in tests/privacy/rdp_accountant_test.cpp.
//
// Fixed-size sampling without replacement (replace-one neighbours, the population size N
// public): a uniformly random subset of m = q·N records. `rdp_fixed_size_gaussian` is
// the upper bound of Wang, Balle and Kasiviswanathan 2019 ("Subsampled Rényi Differential
// Privacy and Analytical Moments Accountant", Theorem 9 with the Gaussian refinement of
// Theorem 27), as in dp_accounting's `_compute_rdp_sample_wor_gaussian_int`. It is
// computed at integer orders ≥ 2 only; at fractional orders it returns +inf, which is
// conservative (an order at +inf never wins the minimum in the (ε, δ) conversion), so give
// fixed-size accounting integer orders. dp_accounting instead interpolates fractional
// orders (WBK19 Corollary 10); we do not. The result is also capped by the unsampled
// Gaussian's α/(2σ²), which sampling can never exceed.
//
// Every function is pure and thread-safe.
#pragma once

#include "shared/util/error.hpp"

namespace fedcore::privacy {

// RDP at `order` of one step of the Poisson-sampled Gaussian mechanism.
// Errors: invalid_argument if q is not in [0, 1], noise_multiplier < 0, order <= 1 or any
// argument is NaN. Returns +inf where the RDP is infinite, and also (conservatively) if the
// fractional-order series fails to converge in its bounded number of terms.
result<double> rdp_poisson_gaussian(double q, double noise_multiplier, double order);

// RDP at `order` of one step of the fixed-size-sampled Gaussian mechanism, sampling ratio
// q = m/N, under replace-one neighbours (upper bound, WBK19). +inf at fractional orders.
// Here `noise_multiplier` is the noise's standard deviation over the REPLACE-ONE
// sensitivity, which for a sum of contributions clipped to C is 2C, not C: pass z/2 for
// noise N(0, (z·C)²). RdpAccountant::compose_fixed_size_gaussian does that halving.
// Errors: as rdp_poisson_gaussian.
result<double> rdp_fixed_size_gaussian(double q, double noise_multiplier, double order);

}  // namespace fedcore::privacy
