#include "shared/privacy/rdp_accountant.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "shared/privacy/rdp.hpp"

namespace fedcore::privacy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// 1 + x/10 computed as the Python reference does (x/10 first), so an order like 2.0 is
// exactly an integer and takes the integer path there and here.
void append_tenths(std::vector<double>& out) {
  for (int x = 1; x <= 99; ++x) {
    out.push_back(1.0 + x / 10.0);
  }
}

void append_range(std::vector<double>& out, int first, int last) {
  for (int a = first; a <= last; ++a) {
    out.push_back(a);
  }
}

result<void> check_orders(std::span<const double> orders) {
  if (orders.empty()) {
    return fail(errc::invalid_argument, "no RDP orders given");
  }
  for (const double order : orders) {
    if (!(order > 1)) {
      return fail(errc::invalid_argument,
                  "RDP order " + std::to_string(order) + " is not greater than 1");
    }
  }
  return {};
}

result<void> check_rdp(std::span<const double> orders, std::span<const double> rdp) {
  if (auto ok = check_orders(orders); !ok) {
    return ok.error();
  }
  if (orders.size() != rdp.size()) {
    return fail(errc::invalid_argument, std::to_string(orders.size()) + " orders but " +
                                            std::to_string(rdp.size()) + " RDP values");
  }
  for (const double r : rdp) {
    if (!(r >= 0)) {
      return fail(errc::invalid_argument, "RDP value " + std::to_string(r) + " is negative or NaN");
    }
  }
  return {};
}

}  // namespace

std::vector<double> orders_D() {
  std::vector<double> out;
  append_tenths(out);
  append_range(out, 11, 63);
  for (const double a : {128.0, 256.0, 512.0, 1024.0}) {
    out.push_back(a);
  }
  return out;
}

std::vector<double> orders_T() {
  std::vector<double> out = {1.25, 1.5, 1.75, 2, 2.25, 2.5, 3, 3.5, 4, 4.5};
  append_range(out, 5, 63);
  for (const double a : {128.0, 256.0, 512.0}) {
    out.push_back(a);
  }
  return out;
}

std::vector<double> orders_O() {
  std::vector<double> out;
  append_tenths(out);
  append_range(out, 12, 63);
  return out;
}

std::vector<double> default_orders() {
  return orders_D();
}

result<EpsilonAtOrder> epsilon_from_rdp(std::span<const double> orders, std::span<const double> rdp,
                                        double delta) {
  if (auto ok = check_rdp(orders, rdp); !ok) {
    return ok.error();
  }
  if (!(delta > 0 && delta < 1)) {
    return fail(errc::invalid_argument, "delta " + std::to_string(delta) + " is not in (0, 1)");
  }
  EpsilonAtOrder best{kInf, orders[0]};
  for (std::size_t i = 0; i < orders.size(); ++i) {
    const double a = orders[i];
    const double r = rdp[i];
    double eps = kInf;
    if (std::isinf(r)) {
      eps = kInf;
    } else if (delta * delta + std::expm1(-r) > 0) {
      // δ >= sqrt(1 - e^-KL) already, and RDP at any order >= 1 bounds KL.
      eps = 0;
    } else if (std::isinf(a)) {
      eps = r;  // the limit of the formula: pure ε-DP
    } else {
      eps = r + std::log1p(-1 / a) - std::log(delta * a) / (a - 1);
    }
    if (eps < best.epsilon) {
      best = {eps, a};
    }
  }
  best.epsilon = std::max(0.0, best.epsilon);
  return best;
}

result<DeltaAtOrder> delta_from_rdp(std::span<const double> orders, std::span<const double> rdp,
                                    double epsilon) {
  if (auto ok = check_rdp(orders, rdp); !ok) {
    return ok.error();
  }
  if (!(epsilon >= 0)) {
    return fail(errc::invalid_argument,
                "epsilon " + std::to_string(epsilon) + " is negative or NaN");
  }
  double best_log_delta = kInf;
  double best_order = orders[0];
  for (std::size_t i = 0; i < orders.size(); ++i) {
    const double a = orders[i];
    const double r = rdp[i];
    // KL bound: δ <= sqrt(1 - e^-r).
    double log_delta = r == 0 ? -kInf : 0.5 * std::log1p(-std::exp(-r));
    if (std::isinf(a)) {
      if (r <= epsilon) {
        log_delta = -kInf;  // pure DP at ε
      }
    } else if (!std::isinf(r)) {
      // ε = r + log1p(-1/a) - log(δ a)/(a-1) solved for log δ.
      log_delta = std::min(log_delta, (a - 1) * (r - epsilon + std::log1p(-1 / a)) - std::log(a));
    }
    if (log_delta < best_log_delta) {
      best_log_delta = log_delta;
      best_order = a;
    }
  }
  return DeltaAtOrder{std::min(1.0, std::exp(best_log_delta)), best_order};
}

RdpAccountant::RdpAccountant(std::vector<double> orders)
    : orders_(std::move(orders)), rdp_(orders_.size(), 0.0) {}

result<RdpAccountant> RdpAccountant::create(std::vector<double> orders) {
  if (auto ok = check_orders(orders); !ok) {
    return ok.error();
  }
  return RdpAccountant(std::move(orders));
}

result<void> RdpAccountant::claim(Neighbours relation) {
  if (neighbours_ && *neighbours_ != relation) {
    return fail(errc::failed_precondition,
                relation == Neighbours::replace_one
                    ? "fixed-size (replace-one) steps cannot be composed with Poisson "
                      "(add-or-remove-one) steps in one accountant"
                    : "Poisson (add-or-remove-one) steps cannot be composed with fixed-size "
                      "(replace-one) steps in one accountant");
  }
  return {};
}

// Adds `steps` copies of one step's RDP at every order
// and records the neighbour relation; steps == 0 changes nothing.
void RdpAccountant::add_steps(const std::vector<double>& step_rdp, std::uint64_t steps,
                              Neighbours relation) {
  if (steps == 0) {
    return;
  }
  for (std::size_t i = 0; i < orders_.size(); ++i) {
    rdp_[i] += step_rdp[i] == 0 ? 0.0 : step_rdp[i] * static_cast<double>(steps);
  }
  neighbours_ = relation;
}

result<void> RdpAccountant::compose_poisson_gaussian(double q, double noise_multiplier,
                                                     std::uint64_t steps) {
  if (auto ok = claim(Neighbours::add_or_remove_one); !ok) {
    return ok.error();
  }
  std::vector<double> step_rdp(orders_.size());
  for (std::size_t i = 0; i < orders_.size(); ++i) {
    auto r = rdp_poisson_gaussian(q, noise_multiplier, orders_[i]);
    if (!r) {
      return r.error();
    }
    step_rdp[i] = *r;
  }
  add_steps(step_rdp, steps, Neighbours::add_or_remove_one);
  return {};
}

result<void> RdpAccountant::compose_fixed_size_gaussian(std::uint64_t sample_size,
                                                        std::uint64_t population,
                                                        double noise_multiplier,
                                                        std::uint64_t steps) {
  if (population == 0 || sample_size > population) {
    return fail(errc::invalid_argument, "fixed-size sample of " + std::to_string(sample_size) +
                                            " from a population of " + std::to_string(population));
  }
  if (auto ok = claim(Neighbours::replace_one); !ok) {
    return ok.error();
  }
  const double q = static_cast<double>(sample_size) / static_cast<double>(population);
  // Replacing one record moves a sum of contributions clipped to C by up to 2C, so the
  // noise is z·C / (2C) = z/2 sensitivities.
  const double sigma = noise_multiplier / 2;
  std::vector<double> step_rdp(orders_.size());
  for (std::size_t i = 0; i < orders_.size(); ++i) {
    auto r = rdp_fixed_size_gaussian(q, sigma, orders_[i]);
    if (!r) {
      return r.error();
    }
    step_rdp[i] = *r;
  }
  add_steps(step_rdp, steps, Neighbours::replace_one);
  return {};
}

result<EpsilonAtOrder> RdpAccountant::epsilon(double delta) const {
  return epsilon_from_rdp(orders_, rdp_, delta);
}

result<DeltaAtOrder> RdpAccountant::delta(double epsilon) const {
  return delta_from_rdp(orders_, rdp_, epsilon);
}

result<double> noise_multiplier_for(double target_epsilon, double delta, double q,
                                    std::uint64_t steps, std::span<const double> orders) {
  if (!(target_epsilon > 0)) {
    return fail(errc::invalid_argument,
                "target epsilon " + std::to_string(target_epsilon) + " is not positive");
  }
  if (!(delta > 0 && delta < 1)) {
    return fail(errc::invalid_argument, "delta " + std::to_string(delta) + " is not in (0, 1)");
  }
  if (!(q > 0 && q <= 1)) {
    return fail(errc::invalid_argument,
                "sampling ratio q = " + std::to_string(q) + " is not in (0, 1]");
  }
  if (steps == 0) {
    return fail(errc::invalid_argument, "zero steps need no noise");
  }
  if (auto ok = check_orders(orders); !ok) {
    return ok.error();
  }
  const std::vector<double> order_list(orders.begin(), orders.end());
  auto epsilon_at = [&](double z) -> result<double> {
    auto accountant = RdpAccountant::create(order_list);
    if (!accountant) {
      return accountant.error();
    }
    if (auto ok = accountant->compose_poisson_gaussian(q, z, steps); !ok) {
      return ok.error();
    }
    auto eps = accountant->epsilon(delta);
    if (!eps) {
      return eps.error();
    }
    return eps->epsilon;
  };

  // Bracket: hi meets the target, lo (0, or the last failing doubling) does not.
  constexpr double kMaxNoise = 1e6;
  constexpr double kTolerance = 1e-6;
  double lo = 0;
  double hi = 1;
  for (;;) {
    auto eps = epsilon_at(hi);
    if (!eps) {
      return eps.error();
    }
    if (*eps <= target_epsilon) {
      break;
    }
    if (hi >= kMaxNoise) {
      return fail(errc::out_of_range, "target epsilon " + std::to_string(target_epsilon) +
                                          " is not reached even at noise multiplier 1e6 (epsilon " +
                                          std::to_string(*eps) + "); add larger orders");
    }
    lo = hi;
    hi *= 2;
  }
  // Bisection: each pass halves hi - lo, so about 20 + log2(hi / lo) passes; the bound on
  // the loop is generous.
  for (int pass = 0; pass < 200 && hi - lo > kTolerance * hi; ++pass) {
    const double mid = lo + (hi - lo) / 2;
    auto eps = epsilon_at(mid);
    if (!eps) {
      return eps.error();
    }
    if (*eps <= target_epsilon) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  if (hi - lo > kTolerance * hi) {
    return fail(errc::out_of_range,
                "noise multiplier bisection did not converge (the answer is "
                "below " +
                    std::to_string(hi) + ")");
  }
  return hi;
}

}  // namespace fedcore::privacy
