// ConnectionStorm: many concurrent connections against one TLS listener, for storm tests
// (issue 19, "connection storms") and by hand (bench/storm.cpp).
//
// A storm keeps `connections` connections in flight at once, each from a loopback source
// address taken in turn from 127.0.0.<first_source> .. 127.0.0.<last_source> (the
// servers limit connections per remote address, and a real storm comes from many
// addresses). What each connection does is its Mode:
//
//   handshake        TCP connect, a full TLS 1.3 handshake (with a client certificate
//                    when cert_file is set), then close; the slot starts the next attempt.
//   request          the same, then one HTTP/1.1 request (`payload`, sent whole) and the
//                    status line of the answer, then close.
//   tcp_idle         TCP connect, then nothing: held until the server closes it.
//   tls_trickle      TCP connect, then a real ClientHello one byte every trickle_interval.
//   tls_idle         a full handshake, then nothing.
//   payload_trickle  a full handshake, then `payload` one byte every trickle_interval (a
//                    partial HTTP request, a partial frame header).
//
// Each of the `connections` slots makes one attempt; with `attempts` or `duration` set it
// starts the next as soon as the last ended, until `attempts` have been started in all
// (0: no cap) and `duration` has passed (a real storm reconnects). The holding modes
// (tcp_idle, tls_trickle, tls_idle, payload_trickle) hold each connection until the server
// closes it or `hold_limit` passes (the storm then closes it itself and counts it as
// still open). Every operation has a deadline (attempt_timeout for connect and
// handshake, or for the whole request); nothing waits for ever.
//
// Outcomes, per attempt, from the client's side:
//   connect_failed   connect() failed or timed out (the listener's backlog was full);
//   refused          the server closed the connection before the handshake completed:
//                    its connection table turned the socket away, or its handshake
//                    deadline passed, or it rejected the handshake;
//   timed_out        the handshake did not complete within attempt_timeout;
//   completed        the handshake completed on the client's side (handshake_ms records
//                    how long it took from the start of connect);
//   rejected         handshake mode with `linger`: after a completed handshake the server
//                    closed the connection (a TLS alert such as certificate_required, or
//                    EOF) within `linger` (in TLS 1.3 the server judges the client's
//                    certificate after the client has finished);
//   answered         request mode: a status line was read (statuses counts them);
//   closed_by_server holding modes: the server closed the connection while it was held
//                    (close_ms records how long after connect, or after the handshake
//                    for the tls_* / payload modes, it did);
//   still_open       holding modes: the server had not closed it after hold_limit;
//   stopped          stop() ended the attempt before it had an outcome.
//
// Threads: run() blocks its caller and drives everything on a private io_context;
// start() does the same on a thread of its own, and wait() joins it. stop() (any thread)
// ends a running storm early: attempts in flight are closed and counted as they end.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace fedcore::testing {

struct StormOptions {
  enum class Mode { handshake, request, tcp_idle, tls_trickle, tls_idle, payload_trickle };

  Mode mode = Mode::handshake;
  std::string server_address = "127.0.0.1";
  std::uint16_t port = 0;
  int first_source = 2;  // source addresses 127.0.0.first .. 127.0.0.last, in turn
  int last_source = 200;
  std::size_t connections = 1000;         // in flight at once
  std::size_t attempts = 0;               // in all (0 = no cap)
  std::chrono::milliseconds duration{0};  // keep starting attempts until then
  // TLS: the CA that signed the server, the name to verify, and an optional client
  // certificate and key (both empty: none is presented).
  std::string ca_file;
  std::string server_name = "localhost";
  std::string cert_file;
  std::string key_file;
  std::string payload;                  // request: the request; payload_trickle: what is trickled
  std::chrono::milliseconds linger{0};  // handshake: wait this long for a rejection
  std::chrono::milliseconds trickle_interval{500};
  std::chrono::milliseconds attempt_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds hold_limit{std::chrono::seconds(30)};
};

struct StormReport {
  std::size_t attempts = 0;
  std::size_t connect_failed = 0;
  std::size_t refused = 0;
  std::size_t timed_out = 0;
  std::size_t completed = 0;
  std::size_t rejected = 0;
  std::size_t answered = 0;
  std::map<int, std::size_t> statuses;  // request mode: HTTP status -> count
  std::size_t closed_by_server = 0;
  std::size_t still_open = 0;
  std::size_t stopped = 0;
  std::size_t local_errors = 0;      // the storm's own failures (bind, socket): see first_error
  std::string first_error;           // the first local error's message, for reports
  std::vector<double> handshake_ms;  // per completed handshake
  std::vector<double> close_ms;      // per closed_by_server
  double wall_ms = 0;

  // "attempts 1000: completed 612, refused 388, ..." (zero counts left out).
  std::string summary() const;
};

// Payloads for the request and payload_trickle modes.
// An HTTP/1.1 GET of `path` with no credentials; without its final empty line when
// `complete` is false (a request header that never ends).
std::string http_get(const std::string& path, bool complete);
// A Fedcore frame header (protocol/frame.hpp) for a HELLO that announces
// `metadata_bytes` of metadata, followed by none of them: a frame that never ends.
std::string hello_frame_header(std::uint32_t metadata_bytes);

// The q-quantile (0..1) of `values` by nearest rank; 0 for none.
double quantile(std::vector<double> values, double q);

class ConnectionStorm {
 public:
  explicit ConnectionStorm(StormOptions options);
  ~ConnectionStorm();  // stops and joins a started storm
  ConnectionStorm(const ConnectionStorm&) = delete;
  ConnectionStorm& operator=(const ConnectionStorm&) = delete;

  // Runs the whole storm on the calling thread and returns its report. Errors in the
  // options (a CA or certificate that cannot be loaded) are reported in first_error with
  // nothing attempted.
  StormReport run();
  // run() on a thread of its own; wait() joins it and returns the report.
  void start();
  StormReport wait();
  // Ends the storm early (thread-safe): no new attempts, open connections closed.
  void stop() noexcept;
  const StormOptions& options() const noexcept { return options_; }
  // Attempts that have ended so far (thread-safe), for progress.
  std::size_t finished() const noexcept { return finished_.load(); }

 private:
  struct State;
  StormOptions options_;
  std::shared_ptr<State> state_;
  std::atomic<std::size_t> finished_{0};
  std::thread thread_;
  StormReport report_;
};

}  // namespace fedcore::testing
