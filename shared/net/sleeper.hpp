// Sleeper: how a coroutine waits for time to pass, injected so tests can drive it.
//
// SteadySleeper waits on the real steady clock (an asio timer). ManualSleeper is for
// tests: a sleep ends only when the test advances the ManualClock past its wake time, so
// "an idle hour" of heartbeats or a 30 s reconnect backoff runs in microseconds and in the
// same order every time. cancel(owner) ends the pending sleeps of one owner (a session
// that ends stops its heartbeats) and cancel_all() every pending sleep (shutdown); the
// sleeping coroutines then see `false`.
//
// Thread safety: both belong to one io_context thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <list>
#include <memory>
#include <unordered_map>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "shared/util/clock.hpp"

namespace fedcore::net {

class Sleeper {
 public:
  virtual ~Sleeper() = default;
  // True when the time passed, false when cancel() or cancel_all() ended the sleep.
  // `owner` only groups sleeps for cancel(); it is never dereferenced.
  virtual boost::asio::awaitable<bool> sleep_for(std::chrono::milliseconds duration,
                                                 const void* owner = nullptr) = 0;
  virtual void cancel(const void* owner) = 0;
  virtual void cancel_all() = 0;
  // Sleeps that have not ended yet.
  virtual std::size_t sleeping() const noexcept = 0;
};

// What both sleepers share: each pending sleep is an asio timer, kept in its owner's list
// while its coroutine waits.
class TimerSleeper : public Sleeper {
 public:
  void cancel(const void* owner) override;
  void cancel_all() override;
  std::size_t sleeping() const noexcept override { return sleeping_; }

 protected:
  struct Pending {
    Clock::steady_time wake;  // ManualSleeper only
    boost::asio::steady_timer* timer;
    bool cancelled = false;
  };
  // Waits on `timer` (set up by the caller) as one pending sleep; false when cancelled.
  boost::asio::awaitable<bool> wait(boost::asio::steady_timer& timer, Clock::steady_time wake,
                                    const void* owner);
  // Grouped by owner: a server with 100,000 sessions cancels one session's sleeps without
  // looking at everyone else's (a flat list made shutting such a server down quadratic).
  std::unordered_map<const void*, std::list<Pending>> pending_;
  std::size_t sleeping_ = 0;
};

class SteadySleeper final : public TimerSleeper {
 public:
  explicit SteadySleeper(boost::asio::io_context& io) : io_(io) {}
  boost::asio::awaitable<bool> sleep_for(std::chrono::milliseconds duration,
                                         const void* owner = nullptr) override;

 private:
  boost::asio::io_context& io_;
};

class ManualSleeper final : public TimerSleeper {
 public:
  ManualSleeper(boost::asio::io_context& io, ManualClock& clock) : io_(io), clock_(clock) {}
  boost::asio::awaitable<bool> sleep_for(std::chrono::milliseconds duration,
                                         const void* owner = nullptr) override;

  // Moves the clock forward by `by` and wakes every sleep whose time has come (the woken
  // coroutines run when the test next runs the io_context).
  void advance(std::chrono::milliseconds by);
  // The earliest wake time from now, or zero when nobody sleeps.
  std::chrono::milliseconds next_wake() const;

 private:
  boost::asio::io_context& io_;
  ManualClock& clock_;
};

}  // namespace fedcore::net
