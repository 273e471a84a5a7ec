// Watchdog: a deadline on one awaited step of a coroutine (a connect, a TLS handshake).
//
// When the deadline passes while the watchdog is armed, it runs `on_expiry` once
// (typically: close the socket, so the awaited operation fails) and fired() turns true.
// disarm() and the destructor make any later expiry do nothing — including an expiry
// whose handler asio has already queued, which steady_timer::cancel() cannot take back.
// So `on_expiry` may capture the coroutine frame by reference: it never runs after the
// watchdog (which lives in that frame) is gone or disarmed.
//
// Thread safety: none; the watchdog and `on_expiry` belong to one single-threaded
// io_context (or strand).
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

namespace fedcore::net {

class Watchdog {
 public:
  // Arms at once. A deadline already in the past (zero or negative) expires on the
  // executor's next pass, never inside the constructor.
  Watchdog(boost::asio::any_io_executor executor, std::chrono::steady_clock::duration deadline,
           std::function<void()> on_expiry);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // After this, the watchdog never runs `on_expiry`. Idempotent.
  void disarm() noexcept;
  // True once `on_expiry` has run.
  bool fired() const noexcept { return state_->fired; }

 private:
  struct State {
    bool armed = true;
    bool fired = false;
    std::function<void()> on_expiry;
  };
  std::shared_ptr<State> state_;
  boost::asio::steady_timer timer_;
};

}  // namespace fedcore::net
