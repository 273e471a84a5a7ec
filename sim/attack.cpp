#include "sim/attack.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "shared/util/rng.hpp"

namespace fedcore::sim {

std::optional<AttackKind> attack_kind(std::string_view name) noexcept {
  if (name == "none")
    return AttackKind::none;
  if (name == "label_flip")
    return AttackKind::label_flip;
  if (name == "sign_flip")
    return AttackKind::sign_flip;
  if (name == "scaled")
    return AttackKind::scaled;
  if (name == "noise")
    return AttackKind::noise;
  return std::nullopt;
}

double default_attack_scale(AttackKind kind) noexcept {
  switch (kind) {
    case AttackKind::sign_flip:
      return 4;
    case AttackKind::scaled:
      return 10;
    case AttackKind::noise:
      return 1;
    case AttackKind::none:
    case AttackKind::label_flip:
      return 0;
  }
  return 0;
}

std::size_t AttackPlan::attackers() const noexcept {
  return static_cast<std::size_t>(std::count(malicious.begin(), malicious.end(), true));
}

AttackPlan plan_attack(AttackKind kind, double scale, double fraction, std::size_t clients,
                       std::uint64_t seed) {
  AttackPlan plan;
  plan.kind = kind;
  plan.scale = scale > 0 ? scale : default_attack_scale(kind);
  plan.seed = seed;
  plan.malicious.assign(clients, false);
  if (kind == AttackKind::none) {
    return plan;
  }
  const auto count = std::min(
      clients, static_cast<std::size_t>(std::llround(fraction * static_cast<double>(clients))));
  // A seeded partial Fisher-Yates shuffle: the first `count` indices are the attackers.
  std::vector<std::size_t> order(clients);
  std::iota(order.begin(), order.end(), std::size_t{0});
  Rng rng(seed ^ 0x61747461636b73ULL);  // "attacks": apart from the partition's draws
  for (std::size_t i = 0; i < count; ++i) {
    const auto j = i + static_cast<std::size_t>(rng.below(clients - i));
    std::swap(order[i], order[j]);
    plan.malicious[order[i]] = true;
  }
  return plan;
}

void apply_attack(const AttackPlan& plan, std::size_t index, std::int64_t round,
                  std::span<const float> global, std::vector<float>& params) {
  const double s = plan.scale;
  switch (plan.kind) {
    case AttackKind::sign_flip:
      for (std::size_t i = 0; i < params.size(); ++i) {
        params[i] =
            static_cast<float>(global[i] - s * (static_cast<double>(params[i]) - global[i]));
      }
      return;
    case AttackKind::scaled:
      for (std::size_t i = 0; i < params.size(); ++i) {
        params[i] =
            static_cast<float>(global[i] + s * (static_cast<double>(params[i]) - global[i]));
      }
      return;
    case AttackKind::noise: {
      Rng rng(plan.seed * 1000003ULL + index * 7919ULL + static_cast<std::uint64_t>(round));
      for (std::size_t i = 0; i < params.size(); ++i) {
        params[i] = static_cast<float>(global[i] + s * rng.normal());
      }
      return;
    }
    case AttackKind::none:
    case AttackKind::label_flip:
      return;
  }
}

std::function<void(const protocol::TrainRequest&, std::span<const float>, client::LocalResult&)>
attack_seam(const AttackPlan& plan, std::size_t index) {
  if (!plan.is_malicious(index) || plan.kind == AttackKind::none ||
      plan.kind == AttackKind::label_flip) {
    return {};
  }
  return [plan, index](const protocol::TrainRequest& request, std::span<const float> global,
                       client::LocalResult& local) {
    apply_attack(plan, index, request.round, global, local.params);
  };
}

}  // namespace fedcore::sim
