// FaultProxy: a fault-injecting TCP proxy for tests, in the spirit of Toxiproxy (issue 19,
// "Faults on the wire").
//
// It listens on 127.0.0.1 (an ephemeral port, `port()`) and forwards every accepted
// connection to 127.0.0.1:upstream_port, byte for byte, through "toxics" set separately for
// each direction: `upstream` is what the client sends to the server, `downstream` what the
// server sends back. TLS and every other protocol pass through untouched (the proxy never
// looks inside the bytes), so it fits between a client daemon and the federation server:
// give the server's port to the proxy and the proxy's port to the client.
//
// Toxics (all off by default, so a default FaultProxy is a plain forwarder):
//   latency + jitter  every chunk read from the sender is held for latency + U[0, jitter]
//                     before it is written (the jitter is drawn from the seeded Rng); a chunk
//                     is never released before the one read before it, so order is kept.
//                     Chunks are pipelined: latency delays bytes, it does not cap throughput.
//   bandwidth         at most `bandwidth` bytes per second leave in that direction, paced in
//                     pieces of 5 ms worth (at least 1 byte, at most 16 KiB); idle time earns
//                     no burst credit.
//   reset             decided once per connection when it is accepted: with probability
//                     `reset.fraction` the connection gets a byte count N drawn uniformly
//                     from [min_bytes, max_bytes]; once exactly N bytes have been forwarded
//                     in that direction (N = 0: as soon as the upstream connection is made),
//                     the proxy waits until the kernel has handed those bytes to the
//                     receiver (at most 1 s) and then resets both sockets (SO_LINGER 0, so
//                     both peers see ECONNRESET, or EOF if they had already stopped reading).
//                     Every connection draws the same number of values whatever the
//                     outcome, so with a fixed seed and connections accepted in the same
//                     order the same connections are reset after the same counts.
//   half_open         nothing more is forwarded in that direction and nothing is read from
//                     its sender (its data waits in kernel buffers until its window fills);
//                     no FIN or RST is passed on, the sockets stay open: a peer that went
//                     silent. Clearing it resumes forwarding where it stopped.
//   blackhole         the sender's bytes are read and discarded (counted in stats); an EOF
//                     from that sender is not passed on either. The connection stays open.
//   segment_bytes     each chunk is written in segments of at most this many bytes, each its
//                     own write on a socket with TCP_NODELAY (the proxy sets it on both of
//                     its sockets), with at least `segment_delay` between consecutive
//                     segments. A receiver may still read two segments at once when it
//                     falls behind: the kernel coalesces what it has not yet delivered.
//
// EOF from one side is passed on as a FIN (shutdown of the send side) once that
// direction's queued bytes are written; the other direction keeps flowing. A reset or an
// error on either socket resets both. At most `max_buffered_bytes` wait in each direction's
// queue; the proxy then stops reading that sender. Connections beyond `max_connections`
// are closed as soon as they are accepted.
//
// Changing toxics at run time: the setters below may be called from any thread. Latency,
// bandwidth, half_open, blackhole and slicing apply to every open connection from its next
// chunk on (a chunk already waiting out its latency keeps its release time); the reset
// toxic is drawn at accept time and so applies to connections accepted afterwards.
//
// Threads: the proxy runs on its own io_context thread, started by the constructor. All
// public member functions are thread-safe. The destructor closes the listener and every
// socket of every connection, and joins the thread (bounded: after 5 s it stops the
// io_context instead of waiting for coroutines to drain).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace fedcore::testing {

// Which way bytes travel through the proxy.
enum class Direction {
  upstream,    // client -> proxy -> server
  downstream,  // server -> proxy -> client
};

// The reset toxic of one direction; see the file comment. `fraction` 0 (the default) is off.
struct ResetToxic {
  double fraction = 0;          // share of accepted connections that get a reset, in [0, 1]
  std::uint64_t min_bytes = 0;  // N is drawn uniformly from [min_bytes, max_bytes]
  std::uint64_t max_bytes = 0;  // REQUIRES: max_bytes >= min_bytes

  // Every connection is reset after exactly n bytes in this direction.
  static ResetToxic after(std::uint64_t n) { return {1.0, n, n}; }
  // A share `fraction` of connections is reset, each after N in [min_bytes, max_bytes].
  static ResetToxic random(double fraction, std::uint64_t min_bytes, std::uint64_t max_bytes) {
    return {fraction, min_bytes, max_bytes};
  }
};

// The toxics of one direction. A value-initialised Toxics forwards untouched.
struct Toxics {
  std::chrono::milliseconds latency{0};
  std::chrono::milliseconds jitter{0};  // extra delay drawn from [0, jitter] per chunk
  std::uint64_t bandwidth = 0;          // bytes per second; 0 = unlimited
  ResetToxic reset;
  bool half_open = false;
  bool blackhole = false;
  std::size_t segment_bytes = 0;  // 0 = write chunks whole
  std::chrono::microseconds segment_delay{0};
};

struct FaultProxyOptions {
  std::uint16_t upstream_port = 0;  // the server on 127.0.0.1; REQUIRES: not 0
  Toxics upstream;
  Toxics downstream;
  std::uint64_t seed = 1;  // reset draws and jitter (shared/util/rng.hpp)
  std::size_t max_connections = 256;
  std::size_t max_buffered_bytes = std::size_t{1} << 20;  // per direction of a connection
  std::chrono::milliseconds connect_timeout{5000};        // to the upstream server
};

// What the proxy has done so far. Bytes count what was written to the receiving socket,
// and are counted just after the write completes: a test that saw bytes arrive should
// wait_for() the count. Refusals, upstream failures and resets are counted before the
// sockets close, so a peer that saw the close can read them at once.
struct FaultProxyStats {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_refused = 0;     // over max_connections
  std::uint64_t connections_open = 0;        // accepted and not yet fully closed
  std::uint64_t upstream_failures = 0;       // the server refused or did not answer in time
  std::uint64_t bytes_upstream = 0;          // forwarded client -> server
  std::uint64_t bytes_downstream = 0;        // forwarded server -> client
  std::uint64_t resets = 0;                  // connections reset by the reset toxic
  std::uint64_t resets_requested = 0;        // connections reset by reset_connections()
  std::uint64_t blackholed_connections = 0;  // connections that discarded at least one byte
  std::uint64_t blackholed_bytes = 0;
  // Ids (accept order, from 0) of the connections the reset toxic reset, in the order the
  // resets happened.
  std::vector<std::uint64_t> reset_ids;
};

class FaultProxy {
 public:
  // Binds 127.0.0.1:0 and starts the proxy thread. Throws fedcore::error_exception
  // (errc::invalid_argument for upstream_port 0 or a reset fraction outside [0, 1] or
  // max_bytes < min_bytes; errc::unavailable when the listener cannot be opened).
  explicit FaultProxy(FaultProxyOptions options);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  // The port clients connect to (on 127.0.0.1).
  std::uint16_t port() const noexcept;

  // Replace or edit one direction's toxics; see "Changing toxics at run time". REQUIRES
  // the same bounds as the constructor (checked with FEDCORE_ASSERT).
  void set_toxics(Direction direction, const Toxics& toxics);
  void update_toxics(Direction direction, const std::function<void(Toxics&)>& edit);
  Toxics toxics(Direction direction) const;

  // One toxic at a time, the others of that direction unchanged.
  void set_latency(Direction direction, std::chrono::milliseconds latency,
                   std::chrono::milliseconds jitter = std::chrono::milliseconds(0));
  void set_bandwidth(Direction direction, std::uint64_t bytes_per_second);
  void set_reset(Direction direction, ResetToxic reset);
  void set_half_open(Direction direction, bool on);
  void set_blackhole(Direction direction, bool on);
  void set_slicing(Direction direction, std::size_t segment_bytes,
                   std::chrono::microseconds segment_delay = std::chrono::microseconds(0));

  // Resets (RST) every connection open now; returns how many. Blocks until done on the
  // proxy thread (at most 5 s; 0 if the proxy thread did not answer).
  std::size_t reset_connections();

  FaultProxyStats stats() const;
  // Waits until `done(stats)` holds or `timeout` passes; `done` runs under the proxy's lock
  // whenever the stats change, so it must be quick and must not call back into the proxy.
  bool wait_for(const std::function<bool(const FaultProxyStats&)>& done,
                std::chrono::milliseconds timeout) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedcore::testing
