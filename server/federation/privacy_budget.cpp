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

// One more round charged at noise multiplier z.
void count_round_at(std::vector<std::pair<double, std::int64_t>>& rounds_at, double z) {
  auto at_z =
      std::find_if(rounds_at.begin(), rounds_at.end(), [&](const auto& r) { return r.first == z; });
  if (at_z == rounds_at.end()) {
    rounds_at.emplace_back(z, 1);
  } else {
    ++at_z->second;
  }
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

result<double> PrivacyBudget::epsilon_for(
    DpRoundShape shape, const std::vector<std::pair<double, std::int64_t>>& rounds_at) const {
  auto accountant = privacy::RdpAccountant::create(privacy::default_orders());
  if (!accountant) {
    return accountant.error();
  }
  for (const auto& [z, rounds] : rounds_at) {
    if (auto ok = accountant->compose_poisson_gaussian(
            shape.q, z, std::uint64_t(rounds) * shape.steps_per_round);
        !ok) {
      return ok.error();
    }
  }
  auto eps = accountant->epsilon(dp_.delta);
  if (!eps) {
    return eps.error();
  }
  return eps->epsilon;
}

result<double> PrivacyBudget::worst_epsilon_after_next(DpRoundShape extra) const {
  auto rounds_at = rounds_at_;
  count_round_at(rounds_at, noise_multiplier_);
  auto worst = epsilon_for(extra, rounds_at);
  for (const auto& shape : shapes_) {
    if (!worst) {
      break;
    }
    auto eps = epsilon_for(shape, rounds_at);
    if (!eps) {
      return eps;
    }
    worst = std::max(*worst, *eps);
  }
  return worst;
}

result<double> PrivacyBudget::epsilon_after_next(DpRoundShape shape) const {
  return worst_epsilon_after_next(shape);
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
    restore(shapes, noise_multiplier_);
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
  return spend(std::span<const DpRoundShape>(&shape, 1));
}

result<PrivacyBudget> PrivacyBudget::with_noise_multiplier(const DpConfig& dp,
                                                           double noise_multiplier) {
  if (dp.mode == protocol::DpMode::none) {
    return fail(errc::invalid_argument, "a privacy budget needs a DP mode");
  }
  if (!(noise_multiplier > 0) || !std::isfinite(noise_multiplier)) {
    return fail(errc::invalid_argument, "a privacy budget needs a positive noise multiplier, not " +
                                            std::to_string(noise_multiplier));
  }
  return PrivacyBudget(dp, noise_multiplier);
}

void PrivacyBudget::restore(std::span<const DpRoundShape> shapes, double z) {
  for (const auto& shape : shapes) {
    remember(shape);
  }
  count_round_at(rounds_at_, z);
  ++rounds_spent_;
}

void PrivacyBudget::remember(DpRoundShape shape) {
  if (std::none_of(shapes_.begin(), shapes_.end(),
                   [&](DpRoundShape s) { return same(s, shape); })) {
    shapes_.push_back(shape);
  }
}

}  // namespace fedcore::federation
