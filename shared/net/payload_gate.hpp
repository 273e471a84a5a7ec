// PayloadGate: an asynchronous semaphore over memory that bounds how many large frame
// payloads are being received (held in memory) at once (docs/engineering.md R3).
//
// A channel whose options carry a gate acquires room for a frame's payload after reading
// the header of a frame whose payload is at least `threshold` bytes and before allocating
// and reading the body; the room is released when the frame's owner is done with the
// read (read_frame returns). Peers waiting for room are held back by TCP flow control.
//
// How much is admitted at once: always up to `min_holders` payloads, whatever their size
// (so a model larger than the budget still moves, one at a time by default), and beyond
// that as many as fit in `budget_bytes` together. A server's memory for incoming updates
// is therefore max(min_holders x model, budget), whatever the number of clients: a 1M-
// parameter model (4 MB) gets a dozen concurrent uploads from a 48 MiB budget, a
// 10M-parameter one (40 MB) one at a time. Waiters are served in arrival order: a small payload
// never overtakes a large one that waits for room.
//
// The gate also keeps the payload buffers of finished frames for the next holder: a
// fresh multi-megabyte buffer costs a page fault and a zeroing per page, which was 40% of
// the server's CPU in a 1M-parameter x 32-client round; a recycled one is warm and already
// the right size. Kept buffers count against the same budget (beyond min_holders of
// them). The owner of a gated frame hands its payload back with recycle() once done.
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
  // REQUIRES: min_holders > 0. budget_bytes 0: exactly min_holders at a time.
  PayloadGate(boost::asio::any_io_executor executor, std::size_t min_holders,
              std::uint64_t threshold, std::uint64_t budget_bytes = 0);

  enum class Wait { granted, timed_out, closed };
  // Waits for room for a payload of `bytes` (FIFO), at most `timeout`; a waiter that
  // times out leaves the queue. Returns closed if the gate was closed while waiting.
  boost::asio::awaitable<Wait> acquire(std::uint64_t bytes, std::chrono::milliseconds timeout);
  // Returns the room of a granted acquire(bytes); admits waiters from the front of the
  // queue for as long as they fit.
  void release(std::uint64_t bytes);
  // Wakes every waiter with closed; later acquire() calls return closed at once.
  void close();

  // A kept buffer with capacity for `length` bytes (its contents are stale and will be
  // overwritten), or an empty vector when none fits.
  std::vector<std::byte> take_buffer(std::uint64_t length);
  // Keeps `buffer` for a later take_buffer if it is at least the threshold and fewer than
  // min_holders are kept or it fits in the budget beside what is held and kept; otherwise
  // frees it.
  void recycle(std::vector<std::byte>&& buffer);
  // Frees every kept buffer (a server between rounds needs the memory for aggregating and
  // checkpointing, not for uploads).
  void drop_buffers() noexcept {
    kept_.clear();
    kept_bytes_ = 0;
  }
  std::size_t kept_buffers() const noexcept { return kept_.size(); }

  std::uint64_t threshold() const noexcept { return threshold_; }
  std::size_t holders() const noexcept { return holders_; }
  std::uint64_t held_bytes() const noexcept { return held_bytes_; }
  std::size_t waiting() const noexcept { return waiters_.size(); }

 private:
  struct Waiter {
    boost::asio::steady_timer timer;
    std::uint64_t bytes = 0;
    bool granted = false;
  };
  bool fits(std::uint64_t bytes) const noexcept;
  void grant_waiters();

  boost::asio::any_io_executor executor_;
  std::size_t min_holders_;
  std::uint64_t threshold_;
  std::uint64_t budget_;
  std::size_t holders_ = 0;
  std::uint64_t held_bytes_ = 0;
  std::vector<std::vector<std::byte>> kept_;
  std::uint64_t kept_bytes_ = 0;
  bool closed_ = false;
  std::deque<std::shared_ptr<Waiter>> waiters_;
};

}  // namespace fedcore::net
