#include "shared/net/frame_channel.hpp"

#include <algorithm>
#include <array>
#include <chrono>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "shared/net/payload_gate.hpp"
#include "shared/util/assert.hpp"
#include "shared/util/huge_pages.hpp"

namespace fedcore::net {
namespace asio = boost::asio;
using boost::system::error_code;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

asio::ip::tcp::socket& lowest(TcpStream& s) {
  return s;
}
asio::ip::tcp::socket& lowest(TlsStream& s) {
  return s.next_layer();
}
LocalStream& lowest(LocalStream& s) {
  return s;
}

// asio::transfer_all() moves at most 64 KiB per system call; for multi-megabyte model
// payloads that is hundreds of extra round trips through the reactor. This condition
// lets each read_some/write_some take up to 4 MiB.
struct TransferAllInLargeSteps {
  std::size_t operator()(const error_code& ec, std::size_t) const noexcept {
    return ec ? 0 : std::size_t{4} << 20;
  }
};

// A payload that is not read into warm spare memory becomes resident kPayloadPieceBytes
// at a time, as it arrives; a gated payload is read in pieces of kGatedPieceBytes, each of
// which must arrive within the stall timeout.
constexpr std::uint64_t kPayloadPieceBytes = std::uint64_t{4} << 20;
constexpr std::uint64_t kGatedPieceBytes = std::uint64_t{1} << 20;

bool is_end_of_stream(const error_code& ec) {
  return ec == asio::error::eof || ec == asio::ssl::error::stream_truncated ||
         ec == asio::error::connection_reset;
}

// One direction's deadline. `generation` makes a late timer handler harmless: if the
// timer expired just as the operation completed (or was rescheduled), its queued handler
// sees that it belongs to an earlier schedule and leaves the socket alone.
struct Deadline {
  explicit Deadline(const asio::any_io_executor& executor) : timer(executor) {}
  asio::steady_timer timer;
  std::uint64_t generation = 0;
  bool armed = false;
  bool expired = false;
  // Lazy timers only: when the armed operation's time is up, and whether the timer waits.
  std::chrono::steady_clock::time_point due{};
  bool scheduled = false;
};

}  // namespace

// The state lives behind a shared_ptr so that a watchdog handler that runs after the
// channel is gone finds nothing to close instead of a dangling pointer.
template <class Stream>
struct FrameChannel<Stream>::Impl : std::enable_shared_from_this<Impl> {
  Impl(Stream s, ChannelOptions o)
      : stream(std::move(s)),
        options(o),
        read(stream.get_executor()),
        write(stream.get_executor()) {}

  // If `deadline` is still armed when its time is up, the socket is closed, which makes
  // the pending operation fail at once.
  void arm(Deadline& deadline, std::chrono::milliseconds timeout) {
    deadline.armed = true;
    deadline.expired = false;
    if (!options.lazy_deadline_timers) {
      deadline.timer.expires_after(timeout);
      wait(deadline);
      return;
    }
    // Lazy: the timer moves only when this deadline is earlier than the one it waits for.
    // A later one is caught up with when the timer fires (on_lazy_timer).
    deadline.due = std::chrono::steady_clock::now() + timeout;
    if (!deadline.scheduled || deadline.timer.expiry() > deadline.due) {
      deadline.timer.expires_at(deadline.due);  // cancels the wait it replaces
      deadline.scheduled = true;
      wait(deadline);
    }
  }

  void wait(Deadline& deadline) {
    const auto generation = ++deadline.generation;
    deadline.timer.async_wait(
        [weak = this->weak_from_this(), &deadline, generation](const error_code& ec) {
          if (ec) {
            return;
          }
          auto self = weak.lock();
          if (!self || deadline.generation != generation) {
            return;
          }
          if (!self->options.lazy_deadline_timers) {
            if (deadline.armed) {
              deadline.expired = true;
              self->close();
            }
            return;
          }
          self->on_lazy_timer(deadline);
        });
  }

  void on_lazy_timer(Deadline& deadline) {
    deadline.scheduled = false;
    if (!deadline.armed) {
      return;  // no operation in flight: the timer lapses until the next arm()
    }
    if (std::chrono::steady_clock::now() < deadline.due) {
      deadline.timer.expires_at(deadline.due);
      deadline.scheduled = true;
      wait(deadline);
      return;
    }
    deadline.expired = true;
    close();
  }

  // The operation is over. A lazy timer keeps waiting (the next operation will likely
  // need it), unless the operation failed: then nothing follows on this channel.
  void disarm(Deadline& deadline, bool failed = false) {
    deadline.armed = false;
    if (!options.lazy_deadline_timers || failed) {
      stop(deadline);
    }
  }

  static void stop(Deadline& deadline) {
    deadline.armed = false;
    deadline.scheduled = false;
    deadline.timer.cancel();
  }

  void close() noexcept {
    stop(read);
    stop(write);
    error_code ignored;
    auto& socket = lowest(stream);
    if (socket.is_open()) {
      socket.shutdown(asio::socket_base::shutdown_both, ignored);
      socket.close(ignored);
    }
  }

  Stream stream;
  ChannelOptions options;
  Deadline read;
  Deadline write;
  AdmissionPolicy admission;
  bool reading = false;
  bool writing = false;
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;
};

template <class Stream>
FrameChannel<Stream>::FrameChannel(Stream stream, ChannelOptions options)
    : impl_(std::make_shared<Impl>(std::move(stream), options)) {}

template <class Stream>
FrameChannel<Stream>::~FrameChannel() {
  if (impl_) {
    Impl::stop(impl_->read);
    Impl::stop(impl_->write);
  }
}

template <class Stream>
FrameChannel<Stream>::FrameChannel(FrameChannel&&) noexcept = default;
template <class Stream>
FrameChannel<Stream>& FrameChannel<Stream>::operator=(FrameChannel&&) noexcept = default;

template <class Stream>
asio::awaitable<result<protocol::Frame>> FrameChannel<Stream>::read_frame(
    std::vector<std::byte> spare) {
  // The frame holds the state, not just the channel: a channel destroyed while a read is
  // suspended (an owner torn down before its io_context) leaves this frame to be resumed
  // with an error or destroyed later, and either touches the state and the socket.
  const std::shared_ptr<Impl> keep = impl_;
  Impl& s = *keep;
  FEDCORE_ASSERT(!s.reading, "FrameChannel: two reads in flight");
  s.reading = true;
  struct Done {
    Impl& s;
    ~Done() { s.reading = false; }
  } done{s};

  auto failure = [&](const error_code& ec, bool expired, bool inside_frame) -> error {
    if (expired) {
      return fail(errc::deadline_exceeded,
                  inside_frame ? "peer too slow: frame not received within the transfer timeout"
                               : "peer silent: no frame within the idle timeout");
    }
    if (is_end_of_stream(ec)) {
      return inside_frame ? fail(errc::out_of_range, "peer closed the connection inside a frame")
                          : fail(errc::unavailable, "peer closed the connection");
    }
    return fail(errc::unavailable, "read failed: " + ec.message());
  };

  // The first byte may take up to the idle timeout; the rest of the header and the body
  // must follow within the transfer timeout. The first read takes as much of the header
  // as has arrived, normally all of it: one system call and one timer fewer per frame
  // than reading its first byte alone, which small frames (collective messages, control
  // frames) feel.
  std::array<std::byte, protocol::kFrameHeaderSize> head{};
  s.arm(s.read, s.options.idle_timeout);
  auto [ec, n] = co_await s.stream.async_read_some(asio::buffer(head), kNoThrow);
  s.disarm(s.read, bool(ec));
  if (ec) {
    co_return failure(ec, s.read.expired, false);
  }
  auto transfer_end = std::chrono::steady_clock::now() + s.options.transfer_timeout;
  auto time_left = [&transfer_end] {
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                        transfer_end - std::chrono::steady_clock::now()),
                    std::chrono::milliseconds(1));
  };
  if (n < head.size()) {
    s.arm(s.read, s.options.transfer_timeout);
    std::size_t rest = 0;
    std::tie(ec, rest) = co_await asio::async_read(
        s.stream, asio::buffer(head.data() + n, head.size() - n), kNoThrow);
    s.disarm(s.read, bool(ec));
    if (ec) {
      co_return failure(ec, s.read.expired, true);
    }
  }
  s.bytes_read += head.size();
  auto header = protocol::decode_header(head, s.options.limits);
  if (!header) {
    s.disarm(s.read, true);
    co_return header.error();
  }
  bool may_take_slot = true;
  if (s.admission) {
    const Admission admitted = s.admission(*header);
    if (!admitted.accepted) {
      s.disarm(s.read);
      s.close();
      co_return fail(errc::resource_exhausted, "frame refused: " + admitted.reason);
    }
    may_take_slot = admitted.may_take_gate_slot;
  }
  // Large payloads wait for a slot of the gate before their memory is allocated; the
  // peer meanwhile is held back by TCP flow control, so the wait is not its fault and
  // the transfer deadline restarts once the slot is granted. The wait has its own
  // deadline: slots held by stalled peers must not park everyone else for ever.
  struct Slot {
    PayloadGate* gate = nullptr;
    std::uint64_t bytes = 0;
    ~Slot() {
      if (gate != nullptr) {
        gate->release(bytes);
      }
    }
  } slot;
  if (auto& gate = s.options.payload_gate; gate && header->payload_length >= gate->threshold()) {
    s.disarm(s.read);
    if (!may_take_slot) {
      s.close();
      co_return fail(errc::resource_exhausted,
                     "frame refused: a large payload from a peer that may not take an upload slot");
    }
    switch (co_await gate->acquire(header->payload_length, s.options.gate_wait_timeout)) {
      case PayloadGate::Wait::granted:
        break;
      case PayloadGate::Wait::closed:
        co_return fail(errc::aborted, "shutting down: payload not read");
      case PayloadGate::Wait::timed_out:
        s.close();
        co_return fail(errc::deadline_exceeded, "no upload slot within the gate's wait timeout");
    }
    slot.gate = gate.get();
    slot.bytes = header->payload_length;
    transfer_end = std::chrono::steady_clock::now() + s.options.transfer_timeout;
    if (spare.capacity() < header->payload_length) {
      spare = gate->take_buffer(header->payload_length);  // warm memory of an earlier frame
    }
  }
  protocol::Frame frame;
  frame.type = header->type;
  frame.metadata.resize(header->metadata_length);
  const std::uint64_t length = header->payload_length;
  const bool warm = spare.capacity() >= length;
  if (slot.gate == nullptr && (warm || length <= kPayloadPieceBytes)) {
    // The common case: no upload slot, and the payload fits in memory we have or is
    // small. Metadata and payload arrive in one read (a scatter read), under one deadline.
    if (warm) {
      frame.payload = std::move(spare);
    }
    frame.payload.resize(length);  // within a warm capacity, or at most one small piece
    const std::array<asio::mutable_buffer, 2> body{
        asio::buffer(frame.metadata.data(), frame.metadata.size()),
        asio::buffer(frame.payload.data(), frame.payload.size())};
    s.arm(s.read, time_left());
    std::tie(ec, n) =
        co_await asio::async_read(s.stream, body, TransferAllInLargeSteps{}, kNoThrow);
    s.disarm(s.read, bool(ec));
    if (ec) {
      co_return failure(ec, s.read.expired, true);
    }
    s.bytes_read += n;
    co_return frame;  // the metadata is parsed once, by the message's handler
  }
  s.arm(s.read, time_left());
  std::tie(ec, n) = co_await asio::async_read(
      s.stream, asio::buffer(frame.metadata.data(), frame.metadata.size()), kNoThrow);
  // Disarmed before anything else: a deadline left armed after read_frame returns would
  // close the channel later if no read follows soon (a handshake's last frame).
  s.disarm(s.read, bool(ec));
  if (ec) {
    co_return failure(ec, s.read.expired, true);
  }
  s.bytes_read += n;
  // The payload: into the caller's spare memory when it is large enough (warm pages);
  // otherwise into memory that grows as the bytes arrive. A slot holder reads piece by
  // piece, each piece within the stall timeout, the whole within the transfer timeout.
  if (warm) {
    frame.payload = std::move(spare);  // shrinking or growing within capacity: no new pages
    frame.payload.resize(length);
  } else {
    // Address space only: the pages are touched (and become resident) piece by piece below,
    // as the bytes arrive, and nothing is ever copied to a larger buffer.
    frame.payload.reserve(length);
    advise_huge_pages(frame.payload.data(), frame.payload.capacity());
  }
  std::uint64_t received = 0;
  while (received < length) {
    std::uint64_t piece = length - received;
    if (slot.gate != nullptr) {
      piece = std::min<std::uint64_t>(piece, kGatedPieceBytes);
    }
    if (!warm) {
      piece = std::min<std::uint64_t>(piece, kPayloadPieceBytes);
      frame.payload.resize(received + piece);  // within capacity: zero-fills this piece only
    }
    auto budget = time_left();
    const bool stall_bound = slot.gate != nullptr && s.options.stall_timeout < budget;
    if (stall_bound) {
      budget = s.options.stall_timeout;
    }
    s.arm(s.read, budget);
    std::tie(ec, n) =
        co_await asio::async_read(s.stream, asio::buffer(frame.payload.data() + received, piece),
                                  TransferAllInLargeSteps{}, kNoThrow);
    s.disarm(s.read, bool(ec));
    if (ec) {
      if (s.read.expired && stall_bound) {
        co_return fail(errc::deadline_exceeded,
                       "peer stalled while holding an upload slot: slot and connection dropped");
      }
      co_return failure(ec, s.read.expired, true);
    }
    received += n;
    s.bytes_read += n;
  }
  co_return frame;  // the metadata is parsed once, by the message's handler
}

template <class Stream>
asio::awaitable<result<void>> FrameChannel<Stream>::write_frame(
    protocol::MessageType type, std::string_view metadata, std::span<const std::byte> payload) {
  const std::shared_ptr<Impl> keep = impl_;  // as in read_frame
  Impl& s = *keep;
  FEDCORE_ASSERT(!s.writing, "FrameChannel: two writes in flight");
  if (metadata.size() > s.options.limits.max_metadata_bytes ||
      payload.size() > s.options.limits.max_payload_bytes) {
    co_return fail(errc::invalid_argument, "frame larger than the channel's limits; not sent");
  }
  s.writing = true;
  const auto head = protocol::encode_header(
      {type, static_cast<std::uint32_t>(metadata.size()), 0, payload.size()});
  const std::array<asio::const_buffer, 3> buffers{asio::buffer(head),
                                                  asio::buffer(metadata.data(), metadata.size()),
                                                  asio::buffer(payload.data(), payload.size())};
  s.arm(s.write, s.options.transfer_timeout);
  auto [ec, n] = co_await asio::async_write(s.stream, buffers, TransferAllInLargeSteps{}, kNoThrow);
  s.disarm(s.write, bool(ec));
  s.writing = false;
  s.bytes_written += n;
  if (ec) {
    if (s.write.expired) {
      co_return fail(errc::deadline_exceeded,
                     "peer too slow: frame not sent within the transfer timeout");
    }
    co_return fail(errc::unavailable, "write failed: " + ec.message());
  }
  co_return result<void>{};
}

template <class Stream>
void FrameChannel<Stream>::close() noexcept {
  if (impl_) {
    impl_->close();
  }
}

template <class Stream>
bool FrameChannel<Stream>::is_open() const noexcept {
  return impl_ && lowest(impl_->stream).is_open();
}

template <class Stream>
Stream& FrameChannel<Stream>::stream() noexcept {
  return impl_->stream;
}

template <class Stream>
const ChannelOptions& FrameChannel<Stream>::options() const noexcept {
  return impl_->options;
}

template <class Stream>
void FrameChannel<Stream>::set_admission(AdmissionPolicy policy) {
  impl_->admission = std::move(policy);
}

template <class Stream>
void FrameChannel<Stream>::set_timeouts(std::chrono::milliseconds idle,
                                        std::chrono::milliseconds transfer) noexcept {
  impl_->options.idle_timeout = idle;
  impl_->options.transfer_timeout = transfer;
}

template <class Stream>
std::uint64_t FrameChannel<Stream>::bytes_read() const noexcept {
  return impl_->bytes_read;
}

template <class Stream>
std::uint64_t FrameChannel<Stream>::bytes_written() const noexcept {
  return impl_->bytes_written;
}

template class FrameChannel<TcpStream>;
template class FrameChannel<TlsStream>;
template class FrameChannel<LocalStream>;

}  // namespace fedcore::net
