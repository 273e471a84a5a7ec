// The RDP accountant: Rényi differential privacy composed over the steps (rounds) of a
// run, and converted to an (ε, δ) guarantee.
//
// Composition is addition, order by order (Mironov 2017, Proposition 1). The per-step
// RDP comes from rdp.hpp: exact for the Poisson-sampled Gaussian (integer AND fractional
// orders, MTZ 2019), an upper bound for fixed-size sampling without replacement (WBK
// 2019, integer orders only; fractional orders are +inf).
//
// Conversion to (ε, δ) (Canonne, Kamath, Steinke 2020, Proposition 12; Asoodeh et al.
// 2020; the conversion of Google's dp_accounting and of Opacus):
//   ε = min over orders α of  RDP(α) + log1p(-1/α) - log(δ·α) / (α - 1)
// with, as in dp_accounting, ε = 0 at any order where δ² > 1 - e^-RDP(α) (the KL bound
// δ <= sqrt(1 - e^-KL), since RDP at any order >= 1 bounds the KL divergence), ε = RDP(∞)
// at the order +inf, and ε clamped at 0. The inverse (δ for a given ε) takes the min of
// the same two bounds solved for δ.
//
// Neighbouring relation: Poisson sampling is accounted under add-or-remove-one, fixed-size
// sampling under replace-one (the population size public). One accountant holds one
// relation: the first composition fixes it and a composition under the other fails.
//
// Thread safety: none; one accountant per run, used from one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "shared/util/error.hpp"

namespace fedcore::privacy {

// Named order sets (all orders > 1).
// D (dp_accounting's defaults): 1 + x/10 for x = 1..99, 11..63, 128, 256, 512, 1024.
std::vector<double> orders_D();
// T (tensorflow/privacy compute_dp_sgd_privacy): 1.25, 1.5, 1.75, 2, 2.25, 2.5, 3, 3.5,
// 4, 4.5, 5..63, 128, 256, 512.
std::vector<double> orders_T();
// O (Opacus' DEFAULT_ALPHAS): 1 + x/10 for x = 1..99, 12..63.
std::vector<double> orders_O();
// The orders an accountant uses unless told otherwise: orders_D().
std::vector<double> default_orders();

struct EpsilonAtOrder {
  double epsilon = 0;  // +inf if no order gives a finite bound
  double order = 0;    // the order that attains it
};

struct DeltaAtOrder {
  double delta = 0;  // in [0, 1]
  double order = 0;
};

// ε for a target δ from RDP values at `orders` (the formula above).
// Errors: invalid_argument if the spans are empty or differ in length, an order is not
// > 1 (or NaN), an RDP value is negative or NaN, or δ is not in (0, 1).
result<EpsilonAtOrder> epsilon_from_rdp(std::span<const double> orders, std::span<const double> rdp,
                                        double delta);

// δ for a target ε from RDP values at `orders` (the inverse of epsilon_from_rdp).
// Errors: invalid_argument as above, or ε negative or NaN.
result<DeltaAtOrder> delta_from_rdp(std::span<const double> orders, std::span<const double> rdp,
                                    double epsilon);

enum class Neighbours { add_or_remove_one, replace_one };

class RdpAccountant {
 public:
  // Errors: invalid_argument if `orders` is empty or an order is not > 1 (+inf allowed).
  static result<RdpAccountant> create(std::vector<double> orders = default_orders());

  // `steps` steps, each one Poisson-sampled Gaussian: every record (client) takes part
  // independently with probability q, contributions are clipped to C and the sum gets
  // N(0, (z·C)²) noise, z = noise_multiplier. Full participation is q = 1.
  // Errors: invalid_argument (q not in [0, 1], z negative or NaN); failed_precondition if
  // this accountant already holds replace-one (fixed-size) steps. On error the accountant
  // is unchanged.
  result<void> compose_poisson_gaussian(double q, double noise_multiplier, std::uint64_t steps);

  // `steps` steps, each sampling exactly `sample_size` of `population` records uniformly
  // without replacement, clipped to C, sum noised with N(0, (z·C)²). Replace-one
  // neighbours, whose sensitivity is 2C: the WBK19 bound is evaluated at z/2. Fractional
  // orders get +inf.
  // Errors: invalid_argument (population 0, sample_size > population, z negative or
  // NaN); failed_precondition if the accountant already holds add-or-remove-one steps.
  result<void> compose_fixed_size_gaussian(std::uint64_t sample_size, std::uint64_t population,
                                           double noise_multiplier, std::uint64_t steps);

  // Errors: as epsilon_from_rdp / delta_from_rdp.
  result<EpsilonAtOrder> epsilon(double delta) const;
  result<DeltaAtOrder> delta(double epsilon) const;

  std::span<const double> orders() const noexcept { return orders_; }
  std::span<const double> rdp() const noexcept { return rdp_; }
  // The relation of the steps composed so far; empty before the first.
  std::optional<Neighbours> neighbours() const noexcept { return neighbours_; }

 private:
  explicit RdpAccountant(std::vector<double> orders);
  result<void> claim(Neighbours relation);
  void add_steps(const std::vector<double>& step_rdp, std::uint64_t steps, Neighbours relation);

  std::vector<double> orders_;
  std::vector<double> rdp_;
  std::optional<Neighbours> neighbours_;
};

// The smallest noise multiplier z such that `steps` Poisson-sampled Gaussian steps at
// ratio q give ε <= target_epsilon at δ over `orders`, found by bisection. The answer z
// satisfies ε(z) <= target_epsilon, and the true smallest z* (ε is decreasing in z) lies
// in (z - 1e-6·z, z]: tolerance 1e-6 relative. At most ~100 evaluations of the accountant.
// Errors: invalid_argument (target_epsilon <= 0, δ not in (0, 1), q not in (0, 1],
// steps 0, bad orders); out_of_range if even z = 1e6 does not reach the target (not
// expected: once RDP < δ² the KL bound makes ε = 0).
result<double> noise_multiplier_for(double target_epsilon, double delta, double q,
                                    std::uint64_t steps, std::span<const double> orders);

}  // namespace fedcore::privacy
