#include "shared/net/watchdog.hpp"

#include <utility>

namespace fedcore::net {

Watchdog::Watchdog(boost::asio::any_io_executor executor,
                   std::chrono::steady_clock::duration deadline, std::function<void()> on_expiry)
    : state_(std::make_shared<State>(State{true, false, std::move(on_expiry)})),
      timer_(std::move(executor)) {
  timer_.expires_after(deadline);
  // The handler holds the state, not the watchdog: it may run after the watchdog and the
  // frame around it are gone (an expiry queued in the same pass as the step finishing),
  // and then it must find `armed` false and touch nothing else.
  timer_.async_wait([state = state_](const boost::system::error_code& ec) {
    if (ec || !state->armed) {
      return;
    }
    state->armed = false;
    state->fired = true;
    // Moved out first: what on_expiry captured is only valid for this one call.
    auto on_expiry = std::move(state->on_expiry);
    on_expiry();
  });
}

Watchdog::~Watchdog() {
  disarm();
}

void Watchdog::disarm() noexcept {
  state_->armed = false;
  // Drops the captures now rather than when the last queued handler lets go of the state.
  state_->on_expiry = nullptr;
  timer_.cancel();
}

}  // namespace fedcore::net
