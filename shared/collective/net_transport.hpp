// Network transport: the ranks of a group connected as a full mesh of FrameChannels
// (net/frame_channel.hpp), over plain TCP (trusted in-datacenter networks only) or
// TLS 1.3 with mutual authentication (job certificates from certs/fedcore-pki). The
// caller picks one explicitly: connect_tcp or connect_tls.
//
// Setup. Each rank listens on `bind_host` (an ephemeral port), publishes "host:port"
// through the Rendezvous, then dials every lower rank and accepts every higher one. The
// dialer says peer_hello {job, rank, size}; the acceptor checks all three and answers
// peer_welcome, or an error frame and closes. The whole setup has `connect_timeout`.
//
// Wire. One MessageType::collective frame per message: the envelope and the message's
// number on the link are the JSON metadata, the payload is the data, handed to the socket
// without a copy. Every link has a reader that drains frames as they arrive (so two ranks
// sending large messages to each other never deadlock on full socket buffers) and a writer
// that sends posted messages in order.
//
// Progress. The transport has no thread of its own: its io_context runs on the calling
// thread inside wait_sends and recv, which therefore also move other links' data. They
// sleep in the reactor when nothing is ready, or with NetOptions::spin first poll it (and
// the shared-memory rings) for that long.
//
// Shared memory. With NetOptions::shared_memory_bytes, each pair on one host also gets
// a ring per direction (shm_ring.hpp), set up in the handshake: peer_hello offers the
// dialer's ring, peer_welcome says whether the acceptor opened it and offers the
// acceptor's, and a second peer_welcome from the dialer says whether it opened that one.
// A message that fits into the ring goes there whole (envelope, number and payload) with
// no system call; the rest go over the socket. Messages are numbered per link and
// direction, and the receiver hands them out in number order, so the two lanes merge
// into one ordered stream. A receiver that polls (spin) finds a ring message without a
// wake-up; before one sleeps in the reactor it flags that in its rings, and a sender that
// publishes a message then also sends a doorbell frame (no message in it) to wake it.
// The socket still reports a dead peer: messages it published before its link closed
// are still received.
//
// Deadlines. recv and wait_sends wait until their deadline; a single frame's transfer is
// bounded by `transfer_timeout` (FrameChannel). A peer that closes or breaks its link
// makes receives from it fail with errc::unavailable once its queued messages are read.
//
// Thread safety: as Transport (one owning thread; abort from any thread).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <boost/asio/ssl/context.hpp>

#include "shared/collective/rendezvous.hpp"
#include "shared/collective/transport.hpp"
#include "shared/protocol/frame.hpp"

namespace fedcore::collective {

struct NetOptions {
  int rank = 0;
  int size = 1;
  std::string job;
  std::string bind_host = "127.0.0.1";  // listen here and advertise this host
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds transfer_timeout{std::chrono::seconds(60)};
  protocol::FrameLimits limits;
  // Payload lane for peers on the same host: a shared-memory ring of this many bytes per
  // direction and pair (shm_ring.hpp); 0 = every payload goes through the socket. A pair
  // that cannot share memory (other hosts, other /dev/shm) uses the socket without fuss.
  std::size_t shared_memory_bytes = 0;
  // How long recv and wait_sends poll for progress before they sleep. Polling saves the
  // wake-up per message but keeps the core busy: only for ranks with a core of their own.
  std::chrono::microseconds spin{0};
};

struct TlsContexts {
  boost::asio::ssl::context* server = nullptr;  // for links this rank accepts
  boost::asio::ssl::context* client = nullptr;  // for links this rank dials
  std::string server_name = "localhost";        // name the servers' certificates carry
};

// Errors: invalid_argument (bad rank/size/host), the rendezvous' errors,
// deadline_exceeded (not all links up within connect_timeout), permission_denied (a peer
// refused our hello: other job or size), unavailable (a peer unreachable).
result<std::unique_ptr<Transport>> connect_tcp(const NetOptions& options, Rendezvous& rendezvous);
// As connect_tcp; the contexts must outlive the transport. Errors also: unauthenticated
// (a TLS handshake failed).
result<std::unique_ptr<Transport>> connect_tls(const NetOptions& options, Rendezvous& rendezvous,
                                               const TlsContexts& tls);

}  // namespace fedcore::collective
