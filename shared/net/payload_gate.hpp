// PayloadGate: an asynchronous counting semaphore that bounds how many large frame
// payloads are being received (held in memory) at once (docs/engineering.md R3).
//
// A channel whose options carry a gate acquires a slot after reading the header of a
// frame whose payload is at least `threshold` bytes and before allocating and reading
// the body; the slot is released when read_frame returns. Peers waiting for a slot are
// held back by TCP flow control. So a server's memory for incoming updates is
// slots x model size, whatever the number of clients.
//
// The gate also keeps the payload buffers of finished frames (at most one per slot) for
// the next slot holder: a fresh multi-megabyte buffer costs a page fault and a zeroing
// per page, which was 40% of the server's CPU in a 1M-parameter x 32-client round; a
// recycled one is warm and already the right size. The owner of a gated frame hands its
// payload back with recycle() once it is done with it.
//
// Thread safety: none; the gate and every channel using it belong to one
// single-threaded io_context (or strand).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

namespace fedcore::net {

class PayloadGate {
 public:
  // REQUIRES: slots > 0.
  PayloadGate(boost::asio::any_io_executor executor, std::size_t slots, std::uint64_t threshold);

  enum class Wait { granted, timed_out, closed };
  // Waits for a free slot (FIFO), at most `timeout`; a waiter that times out leaves the
  // queue. Returns closed if the gate was closed while waiting.
  boost::asio::awaitable<Wait> acquire(std::chrono::milliseconds timeout);
  // Returns a slot; hands it straight to the longest waiter if there is one.
  void release();
  // Wakes every waiter with false; later acquire() calls return false at once.
  void close();

  // A kept buffer with capacity for `length` bytes (its contents are stale and will be
  // overwritten), or an empty vector when none fits.
  std::vector<std::byte> take_buffer(std::uint64_t length);
  // Keeps `buffer` for a later take_buffer if it is at least the threshold and fewer than
  // `slots` are kept; otherwise frees it.
  void recycle(std::vector<std::byte>&& buffer);
  // Frees every kept buffer (a server between rounds needs the memory for aggregating and
  // checkpointing, not for uploads).
  void drop_buffers() noexcept { kept_.clear(); }
  std::size_t kept_buffers() const noexcept { return kept_.size(); }

  std::uint64_t threshold() const noexcept { return threshold_; }
  std::size_t free_slots() const noexcept { return free_; }
  std::size_t waiting() const noexcept { return waiters_.size(); }

 private:
  struct Waiter {
    boost::asio::steady_timer timer;
    bool granted = false;
  };
  boost::asio::any_io_executor executor_;
  std::size_t slots_;
  std::size_t free_;
  std::uint64_t threshold_;
  std::vector<std::vector<std::byte>> kept_;
  bool closed_ = false;
  std::deque<std::shared_ptr<Waiter>> waiters_;
};

}  // namespace fedcore::net
