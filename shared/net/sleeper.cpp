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
  auto me = pending_.insert(pending_.end(), Pending{wake, &timer, owner});
  co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  const bool cancelled = me->cancelled;
  pending_.erase(me);
  co_return !cancelled;
}

void TimerSleeper::cancel(const void* owner) {
  for (auto& p : pending_) {
    if (p.owner == owner) {
      p.cancelled = true;
      p.timer->cancel();
    }
  }
}

void TimerSleeper::cancel_all() {
  for (auto& p : pending_) {
    p.cancelled = true;
    p.timer->cancel();
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
  for (auto& p : pending_) {
    if (p.wake <= clock_.steady()) {
      p.timer->cancel();
    }
  }
}

std::chrono::milliseconds ManualSleeper::next_wake() const {
  if (pending_.empty()) {
    return std::chrono::milliseconds::zero();
  }
  auto earliest = pending_.front().wake;
  for (const auto& p : pending_) {
    earliest = std::min(earliest, p.wake);
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(earliest - clock_.steady());
}

}  // namespace fedcore::net
