#include "shared/net/payload_gate.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "shared/util/assert.hpp"

namespace fedcore::net {

PayloadGate::PayloadGate(boost::asio::any_io_executor executor, std::size_t slots,
                         std::uint64_t threshold)
    : executor_(std::move(executor)), free_(slots), threshold_(threshold) {
  FEDCORE_ASSERT(slots > 0, "PayloadGate needs at least one slot");
}

boost::asio::awaitable<bool> PayloadGate::acquire() {
  if (closed_) {
    co_return false;
  }
  if (free_ > 0 && waiters_.empty()) {
    --free_;
    co_return true;
  }
  // A timer that never expires on its own is the waiter's wake-up call: release()
  // cancels it after marking it granted.
  auto waiter = std::make_shared<Waiter>(Waiter{boost::asio::steady_timer(executor_), false});
  waiter->timer.expires_at(boost::asio::steady_timer::time_point::max());
  waiters_.push_back(waiter);
  co_await waiter->timer.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  co_return waiter->granted;
}

void PayloadGate::release() {
  if (!waiters_.empty()) {
    auto next = std::move(waiters_.front());
    waiters_.pop_front();
    next->granted = !closed_;
    next->timer.cancel();
    return;
  }
  ++free_;
}

void PayloadGate::close() {
  closed_ = true;
  while (!waiters_.empty()) {
    auto next = std::move(waiters_.front());
    waiters_.pop_front();
    next->granted = false;
    next->timer.cancel();
  }
}

}  // namespace fedcore::net
