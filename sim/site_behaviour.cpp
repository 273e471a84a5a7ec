#include "sim/site_behaviour.hpp"

#include <chrono>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "shared/util/rng.hpp"
#include "sim/sim_data.hpp"

namespace fedcore::sim {
namespace asio = boost::asio;
using client::UpdateAction;

namespace {
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
}  // namespace

// One held update. Released by posting to the waiting site's executor, so `released` is
// only touched on that site's thread.
struct SiteBehaviour::Waiter {
  explicit Waiter(const asio::any_io_executor& executor, std::string id)
      : timer(executor), client_id(std::move(id)) {}
  asio::steady_timer timer;
  std::string client_id;
  bool drop = false;
  bool released = false;
};

SiteBehaviour::SiteBehaviour(const SimOptions& options, std::size_t clients)
    : options_(options), clients_(clients) {}

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
  auto waiter = std::make_shared<Waiter>(executor, client_id(index, clients_));
  waiter->drop = f == Fault::drop;
  arrive(index, trained.round, waiter);
  while (!waiter->released) {
    waiter->timer.expires_at(asio::steady_timer::time_point::max());
    co_await waiter->timer.async_wait(kNoThrow);
  }
  co_return waiter->drop ? UpdateAction::drop : UpdateAction::send;
}

void SiteBehaviour::arrive(std::size_t index, std::int64_t round, std::shared_ptr<Waiter> waiter) {
  std::lock_guard lock(mutex_);
  if (round != round_) {
    // The first arrival of a round the server has not announced (or an update of a
    // round that ended): from here on, unordered until round_started says otherwise.
    if (round > round_) {
      round_ = round;
      expected_ = 0;
      released_ = 0;
      in_flight_.clear();
      settled_.clear();
    }
  }
  if (round == round_) {
    settled_.insert(index);
  }
  held_[index] = std::move(waiter);
  release_ready();
}

void SiteBehaviour::gave_up(std::size_t client_index, std::int64_t round) {
  std::lock_guard lock(mutex_);
  if (round != round_ || expected_ == 0 || !settled_.insert(client_index).second) {
    return;  // another round, unordered, or already counted
  }
  ++released_;
  release_ready();
}

void SiteBehaviour::release_ready() {
  auto release = [&](std::map<std::size_t, std::shared_ptr<Waiter>>::iterator it) {
    auto w = it->second;
    held_.erase(it);
    ++released_;
    asio::post(w->timer.get_executor(), [w] {
      w->released = true;
      w->timer.cancel();
    });
    return w;
  };
  if (expected_ == 0) {
    while (!held_.empty()) {
      release(held_.begin());
    }
    return;
  }
  while (in_flight_.empty() && !held_.empty() && released_ + held_.size() >= expected_) {
    auto w = release(held_.begin());
    if (!w->drop) {
      in_flight_ = w->client_id;  // the next waits for the server's answer to this one
    }
  }
}

void SiteBehaviour::round_started(std::int64_t round, std::size_t selected) {
  std::lock_guard lock(mutex_);
  if (round < round_) {
    return;
  }
  // A new round, or a new attempt at this one: anything still held belongs to an earlier
  // attempt; let it go (the server refuses it as stale).
  round_ = round;
  expected_ = 0;
  release_ready();
  released_ = 0;
  in_flight_.clear();
  settled_.clear();
  expected_ = selected;
  release_ready();
}

void SiteBehaviour::answered(const std::string& client_id) {
  std::lock_guard lock(mutex_);
  if (client_id == in_flight_) {
    in_flight_.clear();
    release_ready();
  }
}

FaultCounts SiteBehaviour::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace fedcore::sim
