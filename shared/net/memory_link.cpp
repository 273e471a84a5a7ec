#include "shared/net/memory_link.hpp"

#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace fedcore::net {
namespace asio = boost::asio;

namespace {

// A reader's wake-up: a timer on the reader's executor that waits until the idle deadline
// and that the writer cancels (on that executor) when it queues a frame. It is shared
// because a posted cancel may outlive the end that owns it.
struct Waiter {
  explicit Waiter(asio::any_io_executor executor) : timer(std::move(executor)) {}
  asio::steady_timer timer;
};

// What both ends share: one queue per direction (inbox[i] holds the frames for end i),
// whether each end's reader is parked, and whether the link is closed. Guarded by `mutex`
// because the ends run on different threads. The wake-ups are weak: each timer is owned by
// its own end, so it never outlives that end's io_context because the peer lives on.
struct Shared {
  std::mutex mutex;
  std::deque<protocol::Frame> inbox[2];
  bool waiting[2] = {false, false};
  std::weak_ptr<Waiter> waiter[2];
  std::atomic<bool> closed{false};

  // Wakes `side`'s reader if it is parked. REQUIRES: `mutex` held by the caller, who then
  // calls wake() on the result after unlocking.
  std::shared_ptr<Waiter> take_waiter(int side) {
    if (!waiting[side]) {
      return nullptr;
    }
    waiting[side] = false;
    return waiter[side].lock();
  }
};

// A posted cancel, not a direct one: the timer belongs to the reader's thread. A cancel that
// finds no wait in progress is harmless: the reader checks its queue before every wait, and
// a stale cancel only makes it look once more.
void wake(const std::shared_ptr<Waiter>& waiter) {
  if (waiter) {
    asio::post(waiter->timer.get_executor(), [waiter] { waiter->timer.cancel(); });
  }
}

std::uint64_t frame_bytes(const protocol::Frame& frame) {
  return protocol::kFrameHeaderSize + frame.metadata.size() + frame.payload.size();
}

// One end's own state, kept apart from the Link object so that a read in flight holds it
// alive on its own (the session may drop the Link while its reader is parked).
struct End {
  std::shared_ptr<Shared> shared;
  int side = 0;
  asio::any_io_executor executor;
  std::shared_ptr<Waiter> waiter;
  protocol::FrameLimits limits;
  std::chrono::milliseconds idle_timeout{};
  AdmissionPolicy admission;
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;

  void close() noexcept {
    std::shared_ptr<Waiter> waiters[2];
    {
      std::lock_guard lock(shared->mutex);
      shared->closed = true;
      waiters[0] = shared->take_waiter(0);
      waiters[1] = shared->take_waiter(1);
    }
    wake(waiters[0]);
    wake(waiters[1]);
  }

  // The checks a FrameChannel makes on a header, made on the frame as it arrives.
  result<protocol::Frame> admit(protocol::Frame frame) {
    if (frame.metadata.size() > limits.max_metadata_bytes ||
        frame.payload.size() > limits.max_payload_bytes) {
      close();
      return fail(errc::resource_exhausted, "frame larger than the channel's limits");
    }
    if (admission) {
      const protocol::FrameHeader header{
          frame.type, static_cast<std::uint32_t>(frame.metadata.size()), 0, frame.payload.size()};
      const Admission admitted = admission(header);
      if (!admitted.accepted) {
        close();
        return fail(errc::resource_exhausted, "frame refused: " + admitted.reason);
      }
    }
    bytes_read += frame_bytes(frame);
    return frame;
  }
};

asio::awaitable<result<protocol::Frame>> read_from(std::shared_ptr<End> end) {
  auto& shared = *end->shared;
  const auto& waiter = end->waiter;
  for (;;) {
    std::optional<protocol::Frame> frame;
    {
      std::lock_guard lock(shared.mutex);
      auto& inbox = shared.inbox[end->side];
      if (!inbox.empty()) {
        frame = std::move(inbox.front());
        inbox.pop_front();
      } else if (shared.closed) {
        co_return fail(errc::unavailable, "the peer closed the connection between frames");
      } else {
        shared.waiting[end->side] = true;
      }
    }
    if (frame) {
      co_return end->admit(std::move(*frame));  // outside the lock: a refusal closes the link
    }
    // Parked until a frame or a close wakes us, or the idle deadline passes. Nothing runs on
    // this executor between the unlock above and the wait below, so a wake posted after the
    // unlock finds the wait in progress.
    waiter->timer.expires_after(end->idle_timeout);
    auto [ec] = co_await waiter->timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) {
      continue;  // woken: look again
    }
    bool arrived = false;
    {
      std::lock_guard lock(shared.mutex);
      shared.waiting[end->side] = false;
      arrived = !shared.inbox[end->side].empty() || shared.closed;
    }
    if (!arrived) {
      end->close();
      co_return fail(errc::deadline_exceeded, "no frame within the idle timeout");
    }
  }
}

class MemoryLinkEnd final : public Link {
 public:
  explicit MemoryLinkEnd(std::shared_ptr<End> end) : end_(std::move(end)) {}
  ~MemoryLinkEnd() override { end_->close(); }  // as a socket closes when it goes
  MemoryLinkEnd(const MemoryLinkEnd&) = delete;
  MemoryLinkEnd& operator=(const MemoryLinkEnd&) = delete;

  // Frames arrive whole, in buffers of their own: nothing to receive into, so the spare's
  // memory goes back at once. Not left to the parameter's destructor: with GCC a by-value
  // parameter lives to the end of the caller's full-expression, which for
  // `co_await link->read_frame(std::move(spare))` is the whole wait for the next frame;
  // each of 10,000 simulated sites then held its last TRAIN while it waited (314 MB).
  asio::awaitable<result<protocol::Frame>> read_frame(std::vector<std::byte> spare) override {
    std::vector<std::byte>().swap(spare);
    return read_from(end_);
  }
  void set_admission(AdmissionPolicy policy) override { end_->admission = std::move(policy); }
  void set_timeouts(std::chrono::milliseconds idle, std::chrono::milliseconds) noexcept override {
    end_->idle_timeout = idle;
  }

  void send(protocol::MessageType type, std::string metadata, SharedPayload payload,
            WrittenCallback written) override {
    protocol::Frame frame{type, std::move(metadata), {}};
    if (payload && !payload->empty()) {  // memcpy may not be given an empty vector's null
      frame.payload.resize(payload->size() * sizeof(float));
      std::memcpy(frame.payload.data(), payload->data(), frame.payload.size());
    }
    // As FrameChannel::write_frame refuses to send past its limits, and the Outbox then
    // closes the channel.
    if (frame.metadata.size() > end_->limits.max_metadata_bytes ||
        frame.payload.size() > end_->limits.max_payload_bytes) {
      end_->close();
      return;
    }
    const std::uint64_t bytes = frame_bytes(frame);
    const int peer = 1 - end_->side;
    auto& shared = *end_->shared;
    std::shared_ptr<Waiter> reader;
    {
      std::lock_guard lock(shared.mutex);
      if (shared.closed) {
        return;
      }
      shared.inbox[peer].push_back(std::move(frame));
      reader = shared.take_waiter(peer);
    }
    end_->bytes_written += bytes;
    wake(reader);
    if (written) {
      asio::post(end_->executor, std::move(written));
    }
  }

  void close() noexcept override { end_->close(); }
  bool is_open() const noexcept override { return !end_->shared->closed; }
  std::uint64_t bytes_read() const noexcept override { return end_->bytes_read; }
  std::uint64_t bytes_written() const noexcept override { return end_->bytes_written; }

 private:
  std::shared_ptr<End> end_;
};

}  // namespace

MemoryLinkPair make_memory_link(asio::any_io_executor first_executor,
                                asio::any_io_executor second_executor,
                                const ChannelOptions& options) {
  auto shared = std::make_shared<Shared>();
  const auto end_on = [&](int side, asio::any_io_executor executor) {
    auto end = std::make_shared<End>();
    end->shared = shared;
    end->side = side;
    end->waiter = std::make_shared<Waiter>(executor);
    shared->waiter[side] = end->waiter;
    end->executor = std::move(executor);
    end->limits = options.limits;
    end->idle_timeout = options.idle_timeout;
    return std::make_unique<MemoryLinkEnd>(std::move(end));
  };
  return {end_on(0, std::move(first_executor)), end_on(1, std::move(second_executor))};
}

}  // namespace fedcore::net
