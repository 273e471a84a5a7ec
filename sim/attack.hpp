// Malicious simulated sites (fedcore-sim --attack, issue 18's attack evaluation): what a
// compromised site sends instead of its honest update, so that robust aggregators can be
// compared under the same attack, fraction and seed.
//
//   label_flip  the site trains on its data with every label y replaced by C - 1 - y
//               (a poisoned pipeline; its update is an honest update of the wrong task)
//   sign_flip   it sends global - s * (local - global): its training step reversed and
//               scaled by s = --attack-scale (default 4)
//   scaled      global + s * (local - global), s default 10: model replacement (Bagdasaryan
//               et al. 2020) without the boosting's knowledge of the others
//   noise       global + N(0, s^2) per parameter, s default 1: a site sending garbage
//   little_is_enough  the malicious sites pool their honest updates and all send
//               mu - z * sigma (Baruch et al. 2019; sim/collusion.hpp); s > 0 sets z, else
//               z comes from the paper's rule for the number of sites and attackers
//
// Which sites are malicious: round(fraction * clients) of them, a seeded sample (the same
// for every aggregator compared with the same seed). Each attacker sends in every round it
// is selected for, with its true sample count (its weight under FedAvg).
// little_is_enough needs every attacker in every round and one process (fedcore-sim refuses
// it otherwise, sim/options.cpp): the attackers wait for each other's deposits.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/local_trainer.hpp"
#include "client/session.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/util/error.hpp"
#include "sim/collusion.hpp"

namespace fedcore::sim {

enum class AttackKind { none, label_flip, sign_flip, scaled, noise, little_is_enough };

// "none", "label_flip", "sign_flip", "scaled", "noise", "little_is_enough"; nothing for
// other names.
std::optional<AttackKind> attack_kind(std::string_view name) noexcept;
// The default strength s of an attack (see above); 0 for none and label_flip.
double default_attack_scale(AttackKind kind) noexcept;

struct AttackPlan {
  AttackKind kind = AttackKind::none;
  double scale = 0;             // s; the attack's default when 0
  std::vector<bool> malicious;  // [client index]
  std::uint64_t seed = 1;

  std::size_t attackers() const noexcept;
  bool is_malicious(std::size_t index) const noexcept {
    return index < malicious.size() && malicious[index];
  }
};

// round(fraction * clients) malicious sites drawn with `seed`. REQUIRES fraction in [0, 1].
AttackPlan plan_attack(AttackKind kind, double scale, double fraction, std::size_t clients,
                       std::uint64_t seed);

// The after_training seam (client::ClientOptions::after_training) of site `index`: empty
// for honest sites and for label flipping (done on the data, sim_data.hpp). For
// little_is_enough it deposits the honest update with `collusion` (required then), and the
// before_update seam (collusion_seam) sends the crafted one.
std::function<void(const protocol::TrainRequest&, std::span<const float>, client::LocalResult&)>
attack_seam(const AttackPlan& plan, std::size_t index,
            std::shared_ptr<Collusion> collusion = nullptr);

// The before_update seam of a little_is_enough attacker: waits (at most `limit`) for the
// crafted update and writes it over the one about to be sent, then runs `then`.
std::function<boost::asio::awaitable<client::UpdateAction>(const client::TrainedRound&)>
collusion_seam(
    std::shared_ptr<Collusion> collusion, std::chrono::milliseconds limit,
    std::function<boost::asio::awaitable<client::UpdateAction>(const client::TrainedRound&)> then);

// Rewrites `local.params` as the attack says; pure given (plan, index, round).
void apply_attack(const AttackPlan& plan, std::size_t index, std::int64_t round,
                  std::span<const float> global, std::vector<float>& params);

}  // namespace fedcore::sim
