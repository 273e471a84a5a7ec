// ClientDaemon: the hospital side of the federation, made of three parts:
//   - the data source (client/data_source.hpp): the site's private data, loaded once;
//   - the session (client/session.hpp): the protocol with the server over one connection
//     (HELLO, WELCOME, TRAIN -> UPDATE, heartbeats both ways);
//   - the trainer (client/local_trainer.hpp): one TRAIN request -> new parameters, run on
//     a worker thread so heartbeats keep flowing while it trains (the daemon's own, or a
//     pool that many simulated sites share: ClientOptions::compute).
// The daemon itself connects out (mutual TLS, or a local socket inside fedcore-sim), runs
// a session, and when the connection is lost reconnects after a backoff
// (client/backoff.hpp: decorrelated jitter from a seed of the site's own, so a restarted
// server is not hit by every hospital at the same instant). The backoff starts over after
// a healthy session: WELCOMEd, then connected for at least `healthy_session` on the
// daemon's clock. Only parameters and metrics leave the site, never data.
//
// Thread safety: run() and stop() on the io_context's thread; training runs on an
// internal worker thread (or the shared compute pool) and never touches the connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "client/backoff.hpp"
#include "client/data_source.hpp"
#include "client/external_trainer.hpp"
#include "client/session.hpp"
#include "client/site_data.hpp"
#include "client/site_policy.hpp"
#include "shared/data/dataset.hpp"
#include "shared/net/frame_channel.hpp"
#include "shared/net/sleeper.hpp"
#include "shared/tls/context.hpp"
#include "shared/util/clock.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

struct ClientOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 7443;
  tls::ClientTlsConfig tls;  // tls.server_name: the name the server certificate must carry
  DataSource data;
  // A site that trains its own model (the Python SDK; client/external_trainer.hpp): when
  // set, `data` is not loaded, HELLO announces the trainer's shape, and TRAIN/EVALUATE go
  // to it. Feature statistics are then not shared (the daemon never sees the data).
  std::shared_ptr<ExternalTrainer> external;
  int threads = 1;  // compute threads for local training
  // Where training and evaluation run. Empty (a real daemon): a worker thread of the
  // daemon's own. fedcore-sim gives thousands of simulated sites one bounded pool, so a
  // site costs no thread of its own (at most the pool's size train at once; the others'
  // requests wait in its queue while their sessions keep heartbeating).
  std::shared_ptr<boost::asio::thread_pool> compute;
  // Receive each frame into the payload of the frame before (SessionHooks::
  // keep_receive_buffer): saves mapping fresh pages for every TRAIN of a large model, and
  // holds one payload while the site waits for the next round. fedcore-sim turns it off:
  // each of its thousands of sites would hold its last TRAIN between rounds.
  bool keep_receive_buffer = true;
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
  // Reconnect waits lie in [initial_backoff, max_backoff] (client/backoff.hpp).
  std::chrono::milliseconds initial_backoff{std::chrono::milliseconds(500)};
  std::chrono::milliseconds max_backoff{std::chrono::seconds(30)};
  // A session the server WELCOMEd that stayed connected this long, measured on `clock`,
  // resets the backoff however it ended (client/backoff.hpp, is_healthy_session).
  std::chrono::milliseconds healthy_session{kHealthySession};
  net::ChannelOptions channel;
  // The backoff jitter's seed. Empty (the default, and what fedcore-client uses): the
  // daemon draws its own at create(), jitter_seed(client id) -- OS randomness mixed with
  // the site's certificate, different for every site and every process start. Tests and
  // fedcore-sim set it to make waits reproducible; never give two real sites the same one.
  std::optional<std::uint64_t> seed;
  // How the daemon waits (heartbeats, backoff): real time when empty; tests pass a
  // net::ManualSleeper to drive an idle hour or a reconnect without sleeping.
  std::shared_ptr<net::Sleeper> sleeper;
  // Simulation only; empty in a real daemon. Awaited on the io_context's thread after a
  // round's local training succeeded and before its UPDATE is sent (heartbeats keep
  // flowing meanwhile): fedcore-sim delays slow clients, drops some, and releases updates
  // in a fixed order so that runs are reproducible. `drop` closes the session; the
  // daemon then reconnects as after any lost connection.
  std::function<boost::asio::awaitable<UpdateAction>(const TrainedRound&)> before_update;
  // Simulation only; empty in a real daemon. Called on the training thread with what local
  // training produced, before any check or audit line: fedcore-sim's malicious sites
  // (--attack) rewrite their update here (sign flipping, scaling, noise), so the server sees
  // exactly what a compromised site would send.
  std::function<void(const protocol::TrainRequest&, std::span<const float> global, LocalResult&)>
      after_training;
  // Simulation only (fedcore-sim --transport inproc): when set, every session runs over
  // the link this returns (one end of a memory link on this daemon's io_context, whose
  // other end the simulator hands to FederationServer::attach_local_session) instead of
  // TCP + TLS to host:port; `tls` is then unused. Its errors are treated like a failed
  // connection.
  std::function<result<std::unique_ptr<net::Link>>()> connect_local;
  // What the site agrees to (client/site_policy.hpp): checked against every TRAIN request,
  // and against the server's certificate right after each TLS handshake. The default
  // policy limits nothing.
  SitePolicy policy;
  // The site's audit log (client/audit_log.hpp): a path, or empty for none.
  std::string audit_log;
  // A directory for what the site keeps across restarts (created if missing): its FedBN
  // BatchNorm values, "site-batch-norm.fcp" (client/site_batch_norm.hpp). Empty: memory only.
  std::string site_state;
  // Time for the policy's rounds-per-day window, the audit log and the length of a session
  // (healthy_session); the system clock when empty.
  std::shared_ptr<const Clock> clock;
};

class ClientDaemon {
 public:
  // Loads and splits the data, builds the TLS context and opens the audit log. Errors: those
  // of the loaders (naming the file), the TLS context, AuditLog::open, or invalid_argument
  // for a bad data source.
  static result<std::unique_ptr<ClientDaemon>> create(boost::asio::io_context& io,
                                                      ClientOptions options);
  // The same with data already loaded, or loaded on demand (fedcore-sim shares one load
  // among many simulated sites; client/site_data.hpp); options.data is then ignored.
  // Errors: as above, minus the loaders'.
  static result<std::unique_ptr<ClientDaemon>> create(boost::asio::io_context& io,
                                                      ClientOptions options, SiteData local);
  ~ClientDaemon();
  ClientDaemon(const ClientDaemon&) = delete;
  ClientDaemon& operator=(const ClientDaemon&) = delete;

  // Connects, serves rounds, reconnects; returns after stop(). A server whose certificate
  // the site policy refuses is disconnected at once, logged, audited and retried after the
  // backoff like an unreachable one.
  boost::asio::awaitable<void> run();
  // Sends GOODBYE if connected, closes, and makes run() return. Idempotent.
  void stop();

  std::size_t train_samples() const noexcept;
  std::size_t test_samples() const noexcept;
  std::uint64_t rounds_trained() const noexcept;
  std::uint64_t connections() const noexcept;

 private:
  struct Impl;
  explicit ClientDaemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Runs `daemon` on `io` until SIGINT or SIGTERM stops it (a GOODBYE, then run() returns),
// on the calling thread: what fedcore-client, the Python SDK's run_client and the
// benchmarks' sites do. REQUIRES: nothing else runs `io`.
void run_until_signalled(boost::asio::io_context& io, ClientDaemon& daemon);

}  // namespace fedcore::client
