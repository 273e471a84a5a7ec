// Transport: how one rank of a collective group moves bytes to and from its peers.
//
// Algorithms (collectives.hpp) never name a transport; they post sends, receive in order
// from one peer at a time, and wait for their sends. Three implementations exist:
//   - in-process (inproc_transport.hpp): ranks are threads of one process (tests);
//   - network (net_transport.hpp): a full mesh of FrameChannels over plain TCP (trusted
//     in-datacenter networks only) or TLS 1.3 with mutual authentication, chosen
//     explicitly by the caller;
//   - MPI (mpi_transport.hpp, with -DFEDCORE_MPI=ON): the ranks of an MPI communicator.
//
// Every message carries an Envelope: (job, op sequence, op type, tag, byte count,
// segment). The receiver states the envelope it expects; any difference is a desync and
// fails the receive with errc::aborted, naming both envelopes. A rank that is out of step
// therefore never produces wrong sums: it fails, and because a failed transport aborts
// all its links (see `abort`), its peers fail too, within their own deadlines.
//
// Ordering: messages from one peer arrive in the order that peer posted them.
//
// Thread safety: one transport belongs to one thread (its rank's); only `abort` may be
// called from another thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "shared/util/error.hpp"

namespace fedcore::collective {

using Clock = std::chrono::steady_clock;

// The collective an envelope belongs to (also the wire name, see op_type_name).
enum class OpType : std::uint8_t {
  allreduce = 1,
  broadcast = 2,
  allgather = 3,
  reduce_scatter = 4,
  barrier = 5,
  send_recv = 6,
};
const char* op_type_name(OpType op) noexcept;

// What a message claims to be. Every field must match what the receiver expects.
struct Envelope {
  std::string job;        // the job id; messages of another job are refused
  std::uint64_t seq = 0;  // per-communicator operation counter, equal on all ranks
  OpType op = OpType::barrier;
  std::uint32_t tag = 0;      // user tag (send/recv) or 0
  std::uint64_t bytes = 0;    // the whole operation's byte count on this rank
  std::uint32_t segment = 0;  // position of this message within the operation
  std::uint64_t length = 0;   // payload bytes of this message

  bool operator==(const Envelope&) const = default;
};
// "job=... seq=.. op=allreduce tag=.. bytes=.. segment=.. length=.."
std::string to_string(const Envelope& envelope);

// Errors: aborted, with both envelopes in the message, when `got` differs from `expected`.
result<void> check_envelope(const Envelope& expected, const Envelope& got, int peer);

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  // "inproc", "tcp" or "tls".
  virtual const char* name() const noexcept = 0;

  // Starts sending `payload` to `peer` (!= rank) under `envelope`. The bytes must stay
  // valid and unchanged until wait_sends() returns. Errors are reported by wait_sends
  // (and abort the transport).
  virtual void post_send(int peer, const Envelope& envelope,
                         std::span<const std::byte> payload) = 0;

  // Waits until every posted send has been handed to the operating system (or the peer's
  // mailbox). Errors: deadline_exceeded; unavailable (peer gone); aborted (the transport
  // was aborted earlier, message says why).
  virtual result<void> wait_sends(Clock::time_point deadline) = 0;

  // Receives the next message from `peer` and checks it against `expected`. The returned
  // bytes stay valid until the next recv from the same peer. Posted sends keep making
  // progress while this waits. Errors: deadline_exceeded; unavailable; aborted (desync,
  // or aborted earlier); data_loss (a malformed message).
  virtual result<std::span<const std::byte>> recv(int peer, const Envelope& expected,
                                                  Clock::time_point deadline) = 0;

  // Hands back the bytes the last recv from `peer` returned, which the next recv from it
  // would otherwise do: a shared-memory ring gets their space back at once, so that the
  // peer's next message can go where this one was (shm_ring.hpp). The bytes are invalid
  // from here on. Optional; nothing to do when that recv's bytes were handed back already.
  virtual void release(int peer) noexcept { (void)peer; }

  // Waits until a message from one of `peers` is ready for recv, or the link to one of
  // them has failed (a recv from it then fails at once), and returns that peer; receives
  // nothing. Among ready peers it returns the one whose waiting message arrived first
  // when the transport knows arrival order (in-process, TCP, TLS), else the next ready
  // one after the previously returned peer (MPI), so no peer starves. Reaching the
  // deadline is not a failure: the result is std::nullopt and the transport is intact.
  // Errors: aborted (aborted earlier); unavailable (a posted send failed).
  // REQUIRES: peers non-empty, each in range and != rank().
  virtual result<std::optional<int>> wait_any(std::span<const int> peers,
                                              Clock::time_point deadline) = 0;

  // Closes every link and makes every later operation fail with errc::aborted carrying
  // `why`; peers blocked on this rank see their links fail. Idempotent (the first reason
  // is kept). Safe to call from any thread.
  virtual void abort(const error& why) noexcept = 0;

  // Bytes this rank has sent and received, payload and headers included.
  virtual std::uint64_t bytes_sent() const noexcept = 0;
  virtual std::uint64_t bytes_received() const noexcept = 0;
  // Of bytes_sent, the payload bytes that went through shared memory instead of a socket.
  virtual std::uint64_t bytes_sent_shared_memory() const noexcept { return 0; }
  // When messages to and from `peer` both go through shared-memory rings, the capacity of
  // the smaller of the two rings, else 0. Both ends of a link return the same number (each
  // sees the same two rings), so ranks may choose an algorithm by it and still agree.
  virtual std::size_t shared_memory_link_bytes(int peer) const noexcept {
    (void)peer;
    return 0;
  }
};

}  // namespace fedcore::collective
