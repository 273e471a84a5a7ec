#include "sim/collusion.hpp"

#include <algorithm>
#include <cmath>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/math/distributions/normal.hpp>

#include "shared/util/assert.hpp"

namespace fedcore::sim {
namespace asio = boost::asio;

double little_is_enough_z(std::size_t sites, std::size_t malicious) {
  FEDCORE_ASSERT(sites > 0, "little_is_enough_z: no sites");
  const auto n = static_cast<double>(sites);
  const double s = std::floor(n / 2.0 + 1.0) - static_cast<double>(malicious);
  const double p = (n - s) / n;
  if (!(p > 0.5)) {
    return 0.0;  // no honest site needs winning over: no shift
  }
  if (p >= 0.9987) {
    return 3.0;  // Phi^-1(0.9987) = 3: the clamp
  }
  return std::clamp(boost::math::quantile(boost::math::normal_distribution<double>(), p), 0.0, 3.0);
}

std::vector<float> little_is_enough_update(const std::vector<std::vector<float>>& updates,
                                           double z) {
  FEDCORE_ASSERT(!updates.empty(), "little_is_enough_update: no updates");
  const std::size_t n = updates.front().size();
  const double count = static_cast<double>(updates.size());
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    double sum = 0, squares = 0;
    for (const auto& u : updates) {
      FEDCORE_ASSERT(u.size() == n, "little_is_enough_update: sizes differ");
      sum += u[i];
      squares += static_cast<double>(u[i]) * u[i];
    }
    const double mean = sum / count;
    const double variance = std::max(0.0, squares / count - mean * mean);
    out[i] = static_cast<float>(mean - z * std::sqrt(variance));
  }
  return out;
}

Collusion::Collusion(std::size_t attackers, double z) : attackers_(attackers), z_(z) {}

void Collusion::deposit(std::int64_t round, std::size_t index, std::span<const float> honest) {
  std::lock_guard lock(mutex_);
  auto& r = rounds_[round];
  if (r.crafted) {
    r = Round{};  // the server redid the round: its attackers train again
  }
  r.honest[index].assign(honest.begin(), honest.end());
  // Memory: one model per attacker for the rounds still in flight, not the whole run.
  while (rounds_.size() > 3) {
    rounds_.erase(rounds_.begin());
  }
}

std::vector<float> Collusion::craft(Round& round) {
  std::vector<std::vector<float>> honest;
  honest.reserve(round.honest.size());
  for (const auto& [index, update] : round.honest) {
    honest.push_back(update);
  }
  round.crafted = little_is_enough_update(honest, z_);
  return *round.crafted;
}

std::optional<std::vector<float>> Collusion::crafted(std::int64_t round) {
  std::lock_guard lock(mutex_);
  const auto r = rounds_.find(round);
  if (r == rounds_.end()) {
    return std::nullopt;
  }
  if (r->second.crafted) {
    return r->second.crafted;
  }
  if (r->second.honest.size() < attackers_) {
    return std::nullopt;
  }
  return craft(r->second);
}

std::optional<std::vector<float>> Collusion::crafted_from_what_came(std::int64_t round) {
  std::lock_guard lock(mutex_);
  const auto r = rounds_.find(round);
  if (r == rounds_.end() || (r->second.honest.empty() && !r->second.crafted)) {
    return std::nullopt;
  }
  return r->second.crafted ? *r->second.crafted : craft(r->second);
}

asio::awaitable<void> Collusion::rewrite(std::int64_t round, std::vector<float>& update,
                                         std::chrono::milliseconds limit,
                                         std::chrono::milliseconds poll) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto crafted_update = crafted(round);
  while (!crafted_update && std::chrono::steady_clock::now() < deadline) {
    timer.expires_after(poll);
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    crafted_update = crafted(round);
  }
  if (!crafted_update) {
    crafted_update = crafted_from_what_came(round);
  }
  if (crafted_update && crafted_update->size() == update.size()) {
    update = std::move(*crafted_update);
  }
}

}  // namespace fedcore::sim
