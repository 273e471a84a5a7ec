// ApiServer: the admin HTTPS listener (Boost.Beast, TLS 1.3 with the federation server's
// certificate; no client certificate is asked for). One coroutine per connection reads
// a request, answers it through Api (api.hpp), and loops while the client keeps the
// connection alive; GET /api/v1/events turns the connection into an event stream fed
// by FederationServer::subscribe_events (events.hpp).
//
// Bounds (docs/engineering.md R1, R3): a connection cap (at it, new connections wait in
// the kernel's backlog until a slot is free; over a per-address cap they are closed at
// once); a TLS handshake deadline; a request deadline from the first byte of a request
// to its last (a client that trickles headers is cut off); an idle deadline between
// keep-alive requests; a write deadline; an 8 KiB header limit (431) and per-route body
// limits checked before the body is read (413); a per-connection buffer cap.
//
// Every response carries Content-Security-Policy, X-Content-Type-Options: nosniff,
// X-Frame-Options: DENY and Referrer-Policy: no-referrer; API answers also
// Cache-Control: no-store.
//
// Thread safety: like FederationServer — everything runs on the one-thread io_context
// passed to create(); call listen() and shutdown() on it (or before it runs).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "server/api/auth.hpp"
#include "server/api/auth_limiter.hpp"
#include "server/federation/federation_server.hpp"
#include "server/store/history_store.hpp"
#include "shared/util/clock.hpp"
#include "shared/util/error.hpp"

namespace fedcore::api {

class Api;

struct ApiServerOptions {
  std::string listen_address = "127.0.0.1";
  std::uint16_t port = 8443;  // 0 = any free port (tests)
  std::string web_root = "web";
  std::string cert_file;  // PEM: the server certificate (the federation's)
  std::string key_file;   // PEM: its private key
  std::vector<TokenEntry> tokens;
  std::string federation_listener;  // "host:port", shown by /api/v1/info
  std::size_t max_connections = 256;
  // Connections that have not yet sent a whole request header (TLS handshake, slow or idle
  // sockets), in all and per remote address; and every connection from one address (a
  // browser needs a handful). See net/connection_table.hpp.
  std::size_t max_unauthenticated = 128;
  std::size_t max_unauthenticated_per_address = 16;
  std::size_t max_connections_per_address = 32;
  // The audit trail keeps about this many of its newest rows (server/api/audit.hpp).
  std::int64_t audit_max_rows = 100'000;
  std::size_t header_limit = 8 * 1024;
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds request_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds write_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds event_keepalive{std::chrono::seconds(15)};
  std::size_t event_queue_limit = 1000;
  // Failed authentications per client address before 429 (auth_limiter.hpp).
  AuthLimits auth_limits{};
  // Token expiry, audit times, the failed-authentication window; nullptr: the system
  // clock. Tests inject a ManualClock (and advance it on the io_context's thread).
  const Clock* clock = nullptr;
};

class ApiServer {
 public:
  // Builds the TLS context and the API; binds nothing yet. `federation` and `store`
  // must outlive the ApiServer. Errors: those of tls::make_server_context (naming the
  // certificate or key file).
  static result<std::unique_ptr<ApiServer>> create(boost::asio::io_context& io,
                                                   ApiServerOptions options,
                                                   federation::FederationServer& federation,
                                                   store::HistoryStore& store);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds, subscribes to the federation's events and starts accepting; returns the
  // bound port. Errors: invalid_argument (address), unavailable (bind).
  result<std::uint16_t> listen();
  // Stops accepting, closes every connection (event streams included) and unsubscribes.
  // Idempotent; the io_context then runs dry of this server's work.
  void shutdown();

  // The request handler (its router lists the routes).
  Api& api() noexcept;
  // Open connections.
  std::size_t connections() const noexcept;

 private:
  struct Impl;
  explicit ApiServer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace fedcore::api
