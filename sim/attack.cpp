#include "sim/attack.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "shared/util/assert.hpp"
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
  if (name == "little_is_enough")
    return AttackKind::little_is_enough;
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
    case AttackKind::little_is_enough:  // z from the paper's rule (collusion.hpp)
      return 0;
  }
  return 0;
}

namespace {

boost::asio::awaitable<client::UpdateAction> rewrite_then(
    std::shared_ptr<Collusion> collusion, std::chrono::milliseconds limit,
    std::function<boost::asio::awaitable<client::UpdateAction>(const client::TrainedRound&)> then,
    client::TrainedRound trained) {
  if (trained.update != nullptr) {
    co_await collusion->rewrite(trained.round, *trained.update, limit,
                                std::chrono::milliseconds(2));
  }
  if (then) {
    co_return co_await then(trained);
  }
  co_return client::UpdateAction::send;
}

}  // namespace

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
    case AttackKind::little_is_enough:  // crafted from the others' updates (collusion.hpp)
      return;
  }
}

std::function<void(const protocol::TrainRequest&, std::span<const float>, client::LocalResult&)>
attack_seam(const AttackPlan& plan, std::size_t index, std::shared_ptr<Collusion> collusion) {
  if (!plan.is_malicious(index) || plan.kind == AttackKind::none ||
      plan.kind == AttackKind::label_flip) {
    return {};
  }
  if (plan.kind == AttackKind::little_is_enough) {
    FEDCORE_ASSERT(collusion != nullptr, "attack_seam: little_is_enough needs a Collusion");
    return [collusion, index](const protocol::TrainRequest& request, std::span<const float>,
                              client::LocalResult& local) {
      collusion->deposit(request.round, index, local.params);
    };
  }
  return [plan, index](const protocol::TrainRequest& request, std::span<const float> global,
                       client::LocalResult& local) {
    apply_attack(plan, index, request.round, global, local.params);
  };
}

std::function<boost::asio::awaitable<client::UpdateAction>(const client::TrainedRound&)>
collusion_seam(
    std::shared_ptr<Collusion> collusion, std::chrono::milliseconds limit,
    std::function<boost::asio::awaitable<client::UpdateAction>(const client::TrainedRound&)> then) {
  // A plain function, not a capturing coroutine lambda: the coroutine's frame holds copies
  // of what it needs, whatever becomes of the std::function that started it.
  return [collusion = std::move(collusion), limit,
          then = std::move(then)](const client::TrainedRound& trained) {
    return rewrite_then(collusion, limit, then, trained);
  };
}

}  // namespace fedcore::sim
