// FederationServer: the federation listener and the sessions, around the run controller.
//
// The parts, each in its own file:
//   federation_server   accepts connections, runs one coroutine per session (HELLO,
//                       heartbeats, updates, errors) and wakes the controller on a timer;
//   SessionRegistry     who is connected: one live session per client id
//                       (session_registry.hpp);
//   RunController       runs and rounds, driven by events and the clock, no I/O
//                       (run_controller.hpp), with the round's stages in round_stage.hpp
//                       and the per-update judgement in round.hpp.
//
// Clients connect over mutual TLS 1.3 (tls/context.hpp); a client's identity is the CN
// of its certificate, never a field of a message. After the handshake a client has
// `hello_timeout` to start its HELLO and as long again to finish it (the handshake has
// `handshake_timeout`); then it must send something (heartbeats) at least every
// `channel.idle_timeout`. A second connection under the same identity replaces the
// first (logged). Every connection's failure (handshake refused, bad frame, deadline)
// ends that connection only.
//
// One run is active at a time (run_controller.hpp). Per round: wait for enough clients,
// sample them with an Rng seeded by (seed, round, attempt), send each a TRAIN frame with
// the global model and a fresh nonce, fold valid updates into the strategy as they
// arrive (federation/round.hpp), and close at quorum or deadline. A successful round writes
// its checkpoint file atomically and then commits round row, client results and
// checkpoint reference in one SQLite transaction; a failed round is recorded and the run
// retries or pauses (run_config.hpp). A server killed at any moment resumes with
// `resume_runs()` from the last committed round and its checkpoint.
//
// Shutdown: stop accepting, abandon the round in flight (nothing of it is committed; it
// is redone after a restart), close every session; the io_context then runs dry.
//
// Thread safety: everything runs on the io_context passed to create(), which must be
// run by one thread. Call the public methods from that thread (or post to it).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "server/federation/run_config.hpp"
#include "server/federation/server_hooks.hpp"
#include "server/federation/storage_fault.hpp"
#include "server/store/history_store.hpp"
#include "shared/net/frame_channel.hpp"
#include "shared/net/link.hpp"
#include "shared/net/sleeper.hpp"
#include "shared/tls/context.hpp"
#include "shared/util/error.hpp"

namespace fedcore::federation {

struct ServerOptions {
  std::string listen_address = "127.0.0.1";
  std::uint16_t port = 0;  // 0 = any free port (tests)
  tls::ServerTlsConfig tls;
  std::string checkpoint_dir = "checkpoints";
  std::size_t max_connections = 1024;
  // Live revocation: how often the CRL file's modification time is checked; a change
  // reloads it (reload_revocations). 0 = only on request.
  std::chrono::milliseconds crl_poll_interval{std::chrono::seconds(10)};
  // Connections that have not finished TLS and HELLO, in all and per remote address: the
  // slots an anonymous peer can take (net/connection_table.hpp).
  std::size_t max_unauthenticated = 256;
  std::size_t max_unauthenticated_per_address = 64;
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds hello_timeout{std::chrono::seconds(10)};
  std::uint32_t heartbeat_seconds = 5;  // told to clients in WELCOME; the server sends its own
                                        // at the same interval (heartbeats go both ways)
  // How the server's heartbeat loops wait; null = real time (a SteadySleeper). Tests pass a
  // net::ManualSleeper to run an idle hour in microseconds. Must outlive the server.
  net::Sleeper* sleeper = nullptr;
  net::ChannelOptions channel;  // idle_timeout should exceed 3 heartbeats
  // How a run that a full or read-only disk paused waits for its storage: probes from
  // first_probe, doubling up to max_interval (storage_fault.hpp).
  StorageRetry storage_retry{};
  // A round that is not its run's last writes its checkpoint on a worker thread while the
  // next round starts, and commits once the file is written (run_controller.hpp, "Overlap").
  // false: every round commits before the next starts.
  bool overlap_checkpoints = true;
  // Checkpoint retention: keep the files of each run's newest N committed rounds and delete
  // older ones as rounds commit (the history keeps their rows, marked removed); 0 keeps every
  // round's file (docs/operations.md, "Disk use and checkpoint retention").
  std::int64_t keep_checkpoints = 0;
  // Large updates (>= large_payload_bytes) received at once: always up to
  // max_inflight_updates, and beyond that as many as fit in upload_memory_bytes together
  // (net/payload_gate.hpp). The server's memory for uploads is max(max_inflight_updates x
  // model size, upload_memory_bytes), whatever the client count. The defaults admit a dozen
  // 1M-parameter uploads at once and one 10M-parameter upload, which keeps the server
  // within 3 x model + 100 MB at both sizes (docs/results.md): the model and the exact sum
  // are already 3 x model, and a second 40 MB upload in flight went past the target, for no
  // gain in round time on the 2-core benchmark machine.
  std::size_t max_inflight_updates = 1;
  // Threads beside the io_context's that do the bulk AES-GCM work of the sessions (every
  // large read decrypted, every large write encrypted: net/tls_stream.hpp, offload_to), so
  // uploads from several clients are decrypted on several cores at once while the
  // io_context thread validates and accumulates. 0: all of it on the io_context thread.
  // kAutoWorkerThreads: with 4 or more hardware threads, one per thread beyond the first (at
  // most 8); below that none: on a 2-core machine the second core is better left to the
  // kernel's TCP work (docs/results.md measured 0-25% slower rounds with a worker there).
  static constexpr int kAutoWorkerThreads = -1;
  int worker_threads = kAutoWorkerThreads;
  std::uint64_t upload_memory_bytes = std::uint64_t{48} << 20;
  std::uint64_t large_payload_bytes = std::uint64_t{1} << 20;
  // Data the server evaluates each new global model on, when a run names one; loaded
  // per run from RunConfig::server_test_set.
};

// What the admin plane shows of one connected client session.
struct SessionInfo {
  std::string client_id;
  std::string peer;  // remote address:port ("in-process" for simulated clients)
  std::int64_t connected_ms = 0;
  bool training = false;  // selected in the round in flight and not yet answered
};

// Where the active run is (status()).
struct ServerStatus {
  bool run_active = false;
  std::int64_t active_run_id = 0;  // 0 when no run is active
  std::int64_t active_round = 0;   // round in flight, 0 when none
  bool waiting_for_admin = false;  // manual run waiting for advance_round()
  std::size_t online_clients = 0;
  std::size_t connections = 0;  // open sockets, including those not yet HELLO'd
  // The run a full or read-only disk paused, while it waits for its storage
  // (storage_fault.hpp); its stored state may still say running.
  std::optional<StorageHold> storage_hold;
};

// Bytes the federation listener moved, over all sessions past and present.
struct TrafficCounters {
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
};

class FederationServer {
 public:
  // Builds the TLS context (its errors are returned) and binds nothing yet. `store`
  // must outlive the server.
  static result<std::unique_ptr<FederationServer>> create(boost::asio::io_context& io,
                                                          ServerOptions options,
                                                          store::HistoryStore& store,
                                                          ServerHooks hooks = {});
  ~FederationServer();
  FederationServer(const FederationServer&) = delete;
  FederationServer& operator=(const FederationServer&) = delete;

  // Binds and starts accepting; returns the bound port. Errors: unavailable (bind).
  result<std::uint16_t> listen();
  // Records the run (state running) and starts its loop. Errors: failed_precondition
  // while another run is active; the store's errors.
  result<std::int64_t> start_run(const RunConfig& config);
  // Restarts the loop of every run the store has in state running (after a crash or a
  // stop): at most one; others are marked paused with a reason.
  result<void> resume_runs();
  // Stops a run: the active one abandons its round in flight (nothing of it is
  // committed) and ends in state stopped; a pending or paused run is marked stopped.
  // Errors: not_found (no such run); failed_precondition (already finished, failed or
  // stopped).
  result<void> stop_run(std::int64_t run_id);
  // Pauses the active run (its round in flight is abandoned, nothing of it is stored) and
  // resumes a paused one after its last committed round. See RunController.
  result<void> pause_run(std::int64_t run_id);
  result<void> resume_run(std::int64_t run_id);
  // Manual runs (RunConfig::manual) wait before every round until an admin asks for it.
  // Returns the number of the round that will start. Errors: not_found;
  // failed_precondition when the run is not the active run, is not manual, or a round
  // is already in flight or already requested.
  result<std::int64_t> advance_round(std::int64_t run_id);
  // Every event the server records (the same rows as the store's events table, with
  // their ids) is also passed to each subscriber, in order, on the io_context thread.
  // Subscribers must not block. Returns a handle for unsubscribe_events().
  std::uint64_t subscribe_events(std::function<void(const store::EventRecord&)> listener);
  void unsubscribe_events(std::uint64_t handle);
  // In-process clients (fedcore-sim --transport inproc): serves `link`, one end of a
  // memory link (shared/net/memory_link.hpp) whose end is on this server's io_context, as
  // a session of `client_id`, exactly like a TLS session after its handshake (HELLO,
  // rounds, heartbeats, deadlines). There is no TLS: the caller vouches for the identity,
  // so only a process that owns the server can attach. Refused (the link is closed) while
  // shutting down or at max_connections. Call on the io_context's thread.
  void attach_local_session(std::string client_id, std::unique_ptr<net::Link> link);
  // See the class comment. Idempotent.
  void shutdown();
  // Re-reads the CRL file: handshakes from now on check the new list, and live sessions
  // whose certificate it revokes are closed (event client_revoked). Returns how many were
  // closed. Errors: those of tls::reload_revocations (the old list stays in force).
  // Called by the CRL file watcher (ServerOptions::crl_poll_interval), on SIGHUP by
  // fedcore-server, and by tests.
  result<std::size_t> reload_revocations();

  std::size_t online_clients() const noexcept;
  bool run_active() const noexcept;
  ServerStatus status() const;
  std::vector<SessionInfo> sessions() const;
  TrafficCounters traffic() const;

 private:
  struct Impl;
  explicit FederationServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedcore::federation
