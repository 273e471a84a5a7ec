#include "sim/site_behaviour.hpp"

#include <chrono>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "shared/util/rng.hpp"

namespace fedcore::sim {
namespace asio = boost::asio;
using client::UpdateAction;

namespace {
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
}  // namespace

SiteBehaviour::SiteBehaviour(const SimOptions& options) : options_(options) {}

SiteBehaviour::~SiteBehaviour() = default;

Fault SiteBehaviour::fault(std::size_t index, std::int64_t round,
                           std::uint32_t attempt) const noexcept {
  if (options_.drop_prob <= 0 && options_.slow_prob <= 0) {
    return Fault::none;
  }
  // A stream of its own per (seed, client, round): the decision never depends on which
  // other clients were selected or in what order they finished.
  Rng rng(options_.seed * 0x9E3779B97F4A7C15ULL + std::uint64_t(index) * 0xBF58476D1CE4E5B9ULL +
          std::uint64_t(round) * 0x94D049BB133111EBULL +
          std::uint64_t(attempt) * 0xD6E8FEB86659FD93ULL + 0x5157ULL);
  const double drop = rng.uniform_double();
  const double slow = rng.uniform_double();
  if (drop < options_.drop_prob) {
    return Fault::drop;
  }
  if (slow < options_.slow_prob) {
    return Fault::slow;
  }
  return Fault::none;
}

std::function<asio::awaitable<UpdateAction>(const client::TrainedRound&)> SiteBehaviour::seam(
    std::size_t index) {
  return
      [this, index](const client::TrainedRound& trained) { return before_update(index, trained); };
}

asio::awaitable<UpdateAction> SiteBehaviour::before_update(std::size_t index,
                                                           client::TrainedRound trained) {
  const auto executor = co_await asio::this_coro::executor;
  std::uint32_t attempt = 0;
  {
    std::lock_guard lock(mutex_);
    auto& [round, count] = attempts_[index];
    count = round == trained.round ? count + 1 : 0;
    round = trained.round;
    attempt = count;
  }
  const Fault f = fault(index, trained.round, attempt);
  if (f == Fault::slow) {
    asio::steady_timer delay(executor);
    const double extra = (options_.slow_factor - 1.0) * trained.train_seconds;
    delay.expires_after(std::chrono::microseconds(static_cast<std::int64_t>(extra * 1e6)));
    co_await delay.async_wait(kNoThrow);
  }
  {
    std::lock_guard lock(mutex_);
    if (f == Fault::drop) {
      ++counts_.drops;
    } else if (f == Fault::slow) {
      ++counts_.slow;
    }
  }
  co_return f == Fault::drop ? UpdateAction::drop : UpdateAction::send;
}

FaultCounts SiteBehaviour::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace fedcore::sim
