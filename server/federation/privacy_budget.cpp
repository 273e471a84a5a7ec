#include "server/federation/privacy_budget.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "shared/privacy/rdp_accountant.hpp"

namespace fedcore::federation {
namespace {

bool same(DpRoundShape a, DpRoundShape b) {
  return a.q == b.q && a.steps_per_round == b.steps_per_round;
}

}  // namespace

result<DpRoundShape> dp_round_shape(const DpConfig& dp, std::int32_t local_epochs,
                                    std::int32_t batch_size, std::uint64_t smallest_site_samples) {
  if (dp.mode != protocol::DpMode::record) {
    return DpRoundShape{1.0, 1};
  }
  if (smallest_site_samples == 0 || smallest_site_samples < std::uint64_t(batch_size)) {
    return fail(errc::invalid_argument,
                "record-level DP: a site with " + std::to_string(smallest_site_samples) +
                    " records cannot sample batches of " + std::to_string(batch_size));
  }
  const double q = double(batch_size) / double(smallest_site_samples);
  const auto per_epoch = static_cast<std::uint64_t>(std::llround(1.0 / q));
  return DpRoundShape{q, std::uint64_t(local_epochs) * std::max<std::uint64_t>(per_epoch, 1)};
}

result<PrivacyBudget> PrivacyBudget::create(const DpConfig& dp, std::int64_t planned_rounds,
                                            DpRoundShape first_round) {
  if (dp.mode == protocol::DpMode::none) {
    return fail(errc::invalid_argument, "a privacy budget needs a DP mode");
  }
  double z = dp.noise_multiplier;
  if (z <= 0) {
    auto calibrated = privacy::noise_multiplier_for(
        dp.epsilon, dp.delta, first_round.q,
        std::uint64_t(planned_rounds) * first_round.steps_per_round, privacy::default_orders());
    if (!calibrated) {
      return fail(errc::invalid_argument, "cannot fit " + std::to_string(planned_rounds) +
                                              " rounds into epsilon " + std::to_string(dp.epsilon) +
                                              ": " + calibrated.error().message);
    }
    z = *calibrated;
  }
  return PrivacyBudget(dp, z);
}

result<double> PrivacyBudget::epsilon_for(std::int64_t rounds, DpRoundShape shape) const {
  auto accountant = privacy::RdpAccountant::create(privacy::default_orders());
  if (!accountant) {
    return accountant.error();
  }
  if (auto ok = accountant->compose_poisson_gaussian(shape.q, noise_multiplier_,
                                                     std::uint64_t(rounds) * shape.steps_per_round);
      !ok) {
    return ok.error();
  }
  auto eps = accountant->epsilon(dp_.delta);
  if (!eps) {
    return eps.error();
  }
  return eps->epsilon;
}

result<double> PrivacyBudget::worst_epsilon(std::int64_t rounds, DpRoundShape extra) const {
  auto worst = epsilon_for(rounds, extra);
  for (const auto& shape : shapes_) {
    if (!worst) {
      break;
    }
    auto eps = epsilon_for(rounds, shape);
    if (!eps) {
      return eps;
    }
    worst = std::max(*worst, *eps);
  }
  return worst;
}

result<double> PrivacyBudget::epsilon_after_next(DpRoundShape shape) const {
  return worst_epsilon(rounds_spent_ + 1, shape);
}

result<double> PrivacyBudget::epsilon_after_next(std::span<const DpRoundShape> shapes) const {
  double worst = 0;
  for (const auto& shape : shapes) {
    auto eps = epsilon_after_next(shape);
    if (!eps) {
      return eps;
    }
    worst = std::max(worst, *eps);
  }
  return worst;
}

result<double> PrivacyBudget::spend(std::span<const DpRoundShape> shapes) {
  auto eps = epsilon_after_next(shapes);
  if (eps) {
    for (const auto& shape : shapes) {
      restore(rounds_spent_, shape);
    }
    ++rounds_spent_;
  }
  return eps;
}

result<PrivacyBudget> PrivacyBudget::create(const DpConfig& dp, std::int64_t planned_rounds,
                                            std::span<const DpRoundShape> first_round) {
  if (first_round.empty()) {
    return fail(errc::invalid_argument, "a privacy budget needs the first round's shapes");
  }
  auto best = create(dp, planned_rounds, first_round.front());
  for (const auto& shape : first_round.subspan(1)) {
    if (!best) {
      break;
    }
    auto other = create(dp, planned_rounds, shape);
    if (!other) {
      return other;
    }
    if (other->noise_multiplier() > best->noise_multiplier()) {
      best = std::move(other);
    }
  }
  return best;
}

result<double> PrivacyBudget::spend(DpRoundShape shape) {
  auto eps = epsilon_after_next(shape);
  if (eps) {
    restore(rounds_spent_ + 1, shape);
  }
  return eps;
}

void PrivacyBudget::restore(std::int64_t rounds, DpRoundShape shape) {
  rounds_spent_ = rounds;
  if (std::none_of(shapes_.begin(), shapes_.end(),
                   [&](DpRoundShape s) { return same(s, shape); })) {
    shapes_.push_back(shape);
  }
}

}  // namespace fedcore::federation
