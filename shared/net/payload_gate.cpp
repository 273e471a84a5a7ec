#include "shared/net/payload_gate.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "shared/util/assert.hpp"

namespace fedcore::net {

PayloadGate::PayloadGate(boost::asio::any_io_executor executor, std::size_t min_holders,
                         std::uint64_t threshold, std::uint64_t budget_bytes)
    : executor_(std::move(executor)),
      min_holders_(min_holders),
      threshold_(threshold),
      budget_(budget_bytes) {
  FEDCORE_ASSERT(min_holders > 0, "PayloadGate needs at least one holder");
}

bool PayloadGate::fits(std::uint64_t bytes) const noexcept {
  // Kept buffers are not counted here: a new holder normally takes one of them over (the
  // payloads of one run have one size), so held and kept memory are mostly the same.
  return holders_ < min_holders_ || held_bytes_ + bytes <= budget_;
}

boost::asio::awaitable<PayloadGate::Wait> PayloadGate::acquire(std::uint64_t bytes,
                                                               std::chrono::milliseconds timeout) {
  if (closed_) {
    co_return Wait::closed;
  }
  if (waiters_.empty() && fits(bytes)) {
    ++holders_;
    held_bytes_ += bytes;
    co_return Wait::granted;
  }
  // The waiter's timer is both its deadline and its wake-up call: release() and close()
  // cancel it after deciding, expiry means nobody did.
  auto waiter =
      std::make_shared<Waiter>(Waiter{boost::asio::steady_timer(executor_), bytes, false});
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
  // are still in it; either way nothing was granted). Those behind may fit now.
  std::erase(waiters_, waiter);
  grant_waiters();
  co_return Wait::timed_out;
}

void PayloadGate::grant_waiters() {
  while (!closed_ && !waiters_.empty() && fits(waiters_.front()->bytes)) {
    auto next = std::move(waiters_.front());
    waiters_.pop_front();
    ++holders_;
    held_bytes_ += next->bytes;
    next->granted = true;
    next->timer.cancel();
  }
}

void PayloadGate::release(std::uint64_t bytes) {
  FEDCORE_ASSERT(holders_ > 0 && held_bytes_ >= bytes, "PayloadGate::release without acquire");
  --holders_;
  held_bytes_ -= bytes;
  grant_waiters();
}

std::vector<std::byte> PayloadGate::take_buffer(std::uint64_t length) {
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (it->capacity() >= length) {
      auto buffer = std::move(*it);
      kept_.erase(it);
      kept_bytes_ -= buffer.capacity();
      return buffer;
    }
  }
  return {};
}

void PayloadGate::recycle(std::vector<std::byte>&& buffer) {
  const std::uint64_t size = buffer.capacity();
  const bool room = kept_.size() < min_holders_ || kept_bytes_ + size <= budget_;
  if (size < threshold_ || !room || closed_) {
    std::vector<std::byte>().swap(buffer);  // freed now, not when the caller's frame goes
    return;
  }
  kept_bytes_ += size;
  kept_.push_back(std::move(buffer));
}

void PayloadGate::close() {
  drop_buffers();
  closed_ = true;
  while (!waiters_.empty()) {
    auto next = std::move(waiters_.front());
    waiters_.pop_front();
    next->granted = false;
    next->timer.cancel();
  }
}

}  // namespace fedcore::net
