// FrameChannel: Fedcore frames (protocol/frame.hpp) over a byte stream, with deadlines.
//
// One channel wraps one connected stream: a TLS stream (`TlsStream`, the federation and
// TLS datacenter jobs), a plain TCP socket (`TcpStream`, trusted in-datacenter jobs
// only, chosen explicitly by the caller) or a local socket (`LocalStream`, simulated
// clients inside one fedcore-sim process). Coroutines only (`asio::awaitable`).
//
// Deadlines (docs/engineering.md R1). Every read and write has one; when it passes, the
// channel closes the socket, the operation returns errc::deadline_exceeded and the
// channel is dead. A read waits at most `idle_timeout` for the first byte of the
// header and then at most `transfer_timeout` for the rest of the frame; a write gets
// `transfer_timeout`. Each direction has its own timer, so writing heartbeats never
// extends the deadline of a read from a silent peer.
//
// Limits (R3). The header's lengths are checked against `limits`, and then against the
// admission policy if one is set, before any buffer is allocated; a violation returns the
// codec's error (or resource_exhausted with the policy's reason) and closes the channel.
// The payload's memory becomes resident as its bytes arrive (its address space is
// reserved at once, its pages are touched a few MiB at a time), so a header that announces
// more than the peer sends costs no memory. A gated payload is read
// piece by piece; a slot holder that stalls for `stall_timeout` loses the slot.
//
// Zero copy. `write_frame` sends header, metadata and payload as one gather write; the
// payload span (e.g. a model's flat parameters) is handed to the stream as it is.
//
// Thread safety and ordering: a channel belongs to one strand (or a single-threaded
// io_context). At most one read and at most one write may be in flight at a time
// (asserted); a session that pushes messages must queue them behind one writer.
// The channel must outlive its in-flight operations (hold it in the session coroutine).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "shared/net/tls_stream.hpp"
#include "shared/protocol/frame.hpp"
#include "shared/util/error.hpp"

namespace fedcore::net {

using TcpStream = boost::asio::ip::tcp::socket;
// One end of a connected AF_UNIX socket pair: fedcore-sim's in-process clients only.
using LocalStream = boost::asio::local::stream_protocol::socket;

class PayloadGate;

// What a frame may carry, decided from its header before any memory is allocated for it.
// A server sets one per session (set_admission) from the session's state: tiny before
// HELLO, at most the run's model size for an update, and no gate slot for a client that
// is not in the current round.
struct Admission {
  bool accepted = true;
  bool may_take_gate_slot = true;  // for payloads at or above the gate's threshold
  std::string reason;              // why not, when refused
  static Admission accept(bool may_take_gate_slot = true) { return {true, may_take_gate_slot, {}}; }
  static Admission refuse(std::string why) { return {false, false, std::move(why)}; }
};
using AdmissionPolicy = std::function<Admission(const protocol::FrameHeader&)>;

struct ChannelOptions {
  protocol::FrameLimits limits;
  // Optional: bounds how many large payloads are received at once (net/payload_gate.hpp).
  std::shared_ptr<PayloadGate> payload_gate;
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(120)};
  std::chrono::milliseconds transfer_timeout{std::chrono::seconds(60)};
  // How long a frame may wait for a gate slot, and how long a slot holder may go without
  // delivering the next piece (kGatedPieceBytes) of its payload before it loses the slot.
  std::chrono::milliseconds gate_wait_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds stall_timeout{std::chrono::seconds(10)};
  // Every read and write keeps its deadline either way. By default each one schedules and
  // cancels its direction's timer (a timerfd system call each, 2-4 per small message).
  // Lazy timers stay scheduled between operations and move only when a deadline is earlier
  // than the one they wait for; a later deadline is caught up with when the timer fires.
  // The price: while the channel lives and has not failed, its io_context always has work,
  // so an owner must not wait for run() to return (the collectives' transport polls).
  bool lazy_deadline_timers = false;
};

template <class Stream>
class FrameChannel {
 public:
  // Takes a connected (and, for TLS, handshaken) stream.
  FrameChannel(Stream stream, ChannelOptions options);
  ~FrameChannel();
  FrameChannel(FrameChannel&&) noexcept;
  FrameChannel& operator=(FrameChannel&&) noexcept;
  FrameChannel(const FrameChannel&) = delete;
  FrameChannel& operator=(const FrameChannel&) = delete;

  // Reads one whole frame. With a payload gate, a large payload is read only once the
  // gate grants a slot; the transfer deadline starts then. Errors: deadline_exceeded (also: no
  // slot within gate_wait_timeout, or a slot holder stalled); unavailable when the peer closed
  // the connection between frames or the socket failed; out_of_range when it closed inside a
  // frame; the codec's errors (data_loss, unimplemented, invalid_argument, resource_exhausted)
  // for a bad header or metadata; resource_exhausted when the admission policy refuses the
  // frame; aborted if the gate was closed.
  //
  // `spare` (optional) is memory the caller is done with, typically the payload of its
  // previous frame: when its capacity is enough, the payload is received into it. A receiver
  // of one large frame after another then reuses warm pages instead of having the kernel
  // map and zero fresh ones for every frame (on a 40 MB frame over loopback that costs
  // about as much as the transfer itself).
  boost::asio::awaitable<result<protocol::Frame>> read_frame(std::vector<std::byte> spare = {});

  // Writes one frame. Errors: deadline_exceeded, unavailable; invalid_argument when the
  // lengths exceed this channel's limits (nothing is sent).
  boost::asio::awaitable<result<void>> write_frame(protocol::MessageType type,
                                                   std::string_view metadata,
                                                   std::span<const std::byte> payload = {});

  // Closes the socket; pending operations finish with an error. Idempotent.
  void close() noexcept;
  bool is_open() const noexcept;

  Stream& stream() noexcept;
  const ChannelOptions& options() const noexcept;
  // The policy frames read from now on must pass (see Admission); none = only `limits`.
  void set_admission(AdmissionPolicy policy);
  // Changes the deadlines for operations started afterwards (e.g. a short deadline for a
  // HELLO, then the session's idle timeout).
  void set_timeouts(std::chrono::milliseconds idle, std::chrono::milliseconds transfer) noexcept;
  std::uint64_t bytes_read() const noexcept;
  std::uint64_t bytes_written() const noexcept;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

extern template class FrameChannel<TcpStream>;
extern template class FrameChannel<TlsStream>;
extern template class FrameChannel<LocalStream>;

}  // namespace fedcore::net
