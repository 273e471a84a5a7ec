#include "shared/net/sleeper.hpp"

#include <algorithm>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace fedcore::net {
namespace asio = boost::asio;

// A pending sleep is an entry in a list that lives as long as the sleeping coroutine's
// frame; cancel() flags it and cancels its timer, which resumes the coroutine through the
// io_context like any completed wait.
asio::awaitable<bool> TimerSleeper::wait(asio::steady_timer& timer, Clock::steady_time wake,
                                         const void* owner) {
  auto& group = pending_[owner];  // a map node: stays put while other owners come and go
  auto me = group.insert(group.end(), Pending{wake, &timer});
  ++sleeping_;
  co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  const bool cancelled = me->cancelled;
  group.erase(me);
  if (group.empty()) {
    pending_.erase(owner);
  }
  --sleeping_;
  co_return !cancelled;
}

void TimerSleeper::cancel(const void* owner) {
  const auto group = pending_.find(owner);
  if (group == pending_.end()) {
    return;
  }
  for (auto& p : group->second) {
    p.cancelled = true;
    p.timer->cancel();
  }
}

void TimerSleeper::cancel_all() {
  for (auto& [owner, group] : pending_) {
    for (auto& p : group) {
      p.cancelled = true;
      p.timer->cancel();
    }
  }
}

asio::awaitable<bool> SteadySleeper::sleep_for(std::chrono::milliseconds duration,
                                               const void* owner) {
  asio::steady_timer timer(io_, duration);
  const bool slept = co_await wait(timer, {}, owner);
  co_return slept;
}

// A manual sleep is a timer that never expires by itself: advance() cancels it (without
// flagging it cancelled) once the manual clock has passed its wake time.
asio::awaitable<bool> ManualSleeper::sleep_for(std::chrono::milliseconds duration,
                                               const void* owner) {
  asio::steady_timer timer(io_, asio::steady_timer::time_point::max());
  if (duration <= std::chrono::milliseconds::zero()) {
    timer.expires_at(asio::steady_timer::time_point::min());
  }
  const bool slept = co_await wait(timer, clock_.steady() + duration, owner);
  co_return slept;
}

void ManualSleeper::advance(std::chrono::milliseconds by) {
  clock_.advance(by);
  for (auto& [owner, group] : pending_) {
    for (auto& p : group) {
      if (p.wake <= clock_.steady()) {
        p.timer->cancel();
      }
    }
  }
}

std::chrono::milliseconds ManualSleeper::next_wake() const {
  if (pending_.empty()) {
    return std::chrono::milliseconds::zero();
  }
  auto earliest = Clock::steady_time::max();
  for (const auto& [owner, group] : pending_) {
    for (const auto& p : group) {
      earliest = std::min(earliest, p.wake);
    }
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(earliest - clock_.steady());
}

}  // namespace fedcore::net
