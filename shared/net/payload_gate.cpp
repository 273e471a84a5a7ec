#include "shared/net/payload_gate.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "shared/util/assert.hpp"

namespace fedcore::net {

PayloadGate::PayloadGate(boost::asio::any_io_executor executor, std::size_t slots,
                         std::uint64_t threshold)
    : executor_(std::move(executor)), slots_(slots), free_(slots), threshold_(threshold) {
  FEDCORE_ASSERT(slots > 0, "PayloadGate needs at least one slot");
}

boost::asio::awaitable<PayloadGate::Wait> PayloadGate::acquire(std::chrono::milliseconds timeout) {
  if (closed_) {
    co_return Wait::closed;
  }
  if (free_ > 0 && waiters_.empty()) {
    --free_;
    co_return Wait::granted;
  }
  // The waiter's timer is both its deadline and its wake-up call: release() and close()
  // cancel it after deciding, expiry means nobody did.
  auto waiter = std::make_shared<Waiter>(Waiter{boost::asio::steady_timer(executor_), false});
  waiter->timer.expires_after(timeout);
  waiters_.push_back(waiter);
  co_await waiter->timer.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  if (waiter->granted) {
    co_return Wait::granted;
  }
  if (closed_) {
    co_return Wait::closed;
  }
  // Timed out: leave the queue (release() may already have passed us by, it did not if we
  // are still in it; either way nothing was granted).
  std::erase(waiters_, waiter);
  co_return Wait::timed_out;
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

std::vector<std::byte> PayloadGate::take_buffer(std::uint64_t length) {
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (it->capacity() >= length) {
      auto buffer = std::move(*it);
      kept_.erase(it);
      return buffer;
    }
  }
  return {};
}

void PayloadGate::recycle(std::vector<std::byte>&& buffer) {
  if (buffer.capacity() < threshold_ || kept_.size() >= slots_ || closed_) {
    std::vector<std::byte>().swap(buffer);  // freed now, not when the caller's frame goes
    return;
  }
  kept_.push_back(std::move(buffer));
}

void PayloadGate::close() {
  kept_.clear();
  closed_ = true;
  while (!waiters_.empty()) {
    auto next = std::move(waiters_.front());
    waiters_.pop_front();
    next->granted = false;
    next->timer.cancel();
  }
}

}  // namespace fedcore::net
