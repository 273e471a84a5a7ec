// Longer than our ~500-line guideline, on purpose: the session coroutine (HELLO, frames,
// heartbeats, updates) and the FederationServer facade the API calls share one Impl; the
// parts with decisions of their own are in run_controller*.cpp, session_registry.cpp and
// round*.cpp.
#include "server/federation/federation_server.hpp"

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include "server/federation/held_announcements.hpp"
#include "server/federation/orphan_checkpoints.hpp"
#include "server/federation/run_controller.hpp"
#include "server/federation/session_registry.hpp"
#include "shared/net/connection_table.hpp"
#include "shared/net/listener.hpp"
#include "shared/net/payload_gate.hpp"
#include "shared/net/watchdog.hpp"
#include "shared/util/clock.hpp"
#include "shared/util/log_throttle.hpp"
#include "shared/util/threads.hpp"
#include "shared/util/worker_pool.hpp"
#include "shared/util/worker_thread.hpp"

namespace fedcore::federation {
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using net::TlsStream;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
// Connections taken from the backlog per accept completion (net::accept_waiting).
constexpr std::size_t kAcceptBatch = 64;
// A HELLO names the client's schema, capabilities and software: a few hundred bytes.
constexpr std::uint32_t kMaxHelloMetadata = 16 * 1024;

// Nonces come from OpenSSL's CSPRNG.
class OpenSslEntropy final : public Entropy {
 public:
  std::string nonce() override {
    unsigned char bytes[16];
    if (RAND_bytes(bytes, sizeof bytes) != 1) {
      // The CSPRNG failing is not an input error; nothing sensible can continue.
      std::abort();
    }
    static const char* const kHex = "0123456789abcdef";
    std::string out;
    for (unsigned char b : bytes) {
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
    return out;
  }
};

// Exceptions end only that connection (docs/engineering.md, habit 3).
void log_session_exception(std::exception_ptr e) {
  if (e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      spdlog::error("session ended by an unexpected exception: {}", ex.what());
    }
  }
}

// The controller's checkpoint writes, on threads of their own so the next round can start
// while one goes to disk (run_controller.hpp, "Overlap"): files on one, the commits after
// them on another, so that one round's file is written while the round before commits.
// `wake` runs after each job's last part.
class BackgroundWriter final : public BackgroundWork {
 public:
  explicit BackgroundWriter(std::function<void()> wake)
      : committer_(wake), file_writer_(std::move(wake)) {}
  void start(std::function<void()> job) override {
    file_writer_.submit([this, job = std::move(job)] {
      job();
      tell_returned();
    });
  }
  // The file's thread hands `then` on when `write` returns; the second thread runs the
  // `then`s in the order their writes were started (one thread, first in first out).
  void start(std::function<void()> write, std::function<void()> then) override {
    file_writer_.submit([this, write = std::move(write), then = std::move(then)]() mutable {
      write();
      committer_.submit([this, then = std::move(then)] {
        then();
        tell_returned();
      });
    });
  }
  // The files first: each of them hands a job on to the committer.
  void finish() override {
    file_writer_.drain();
    committer_.drain();
  }
  // `done` is looked at under the lock that each job's end takes before it notifies, so
  // an end between the look and the wait cannot be missed.
  void finish_until(const std::function<bool()>& done) override {
    std::unique_lock lock(mutex_);
    job_returned_.wait(lock, done);
  }

 private:
  void tell_returned() {
    std::lock_guard lock(mutex_);
    job_returned_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable job_returned_;  // a job's last part returned
  // Declared after the above and the committer before the file thread, so each is
  // destroyed after everything that uses it: the file thread submits to the committer
  // until it stops, and both threads' jobs notify.
  WorkerThread committer_;
  WorkerThread file_writer_;
};

}  // namespace

struct FederationServer::Impl final : EventSink {
  Impl(asio::io_context& io_context, ServerOptions o, store::HistoryStore& s,
       std::optional<store::HistoryStore> second, ServerHooks h, asio::ssl::context tls)
      : io(io_context),
        options(std::move(o)),
        store(s),
        commit_store(std::move(second)),
        hooks(h),
        tls_context(std::move(tls)),
        acceptor(io_context),
        wakeup(io_context),
        crl_tick(io_context),
        own_sleeper(options.sleeper == nullptr ? std::make_unique<net::SteadySleeper>(io_context)
                                               : nullptr),
        sleeper(options.sleeper != nullptr ? *options.sleeper : *own_sleeper),
        controller(environment(s, std::move(h))),
        table(net::ConnectionLimits{options.max_connections, options.max_unauthenticated,
                                    options.max_unauthenticated_per_address}),
        room(io_context),
        // A finished write wakes the controller on the io_context's thread, unless the
        // server is gone by then.
        background([this, alive = std::weak_ptr<const char>(alive)] {
          asio::post(io, [this, alive] {
            if (!alive.expired()) {
              drive();
            }
          });
        }) {
    table.set_room_callback([this] { room.cancel(); });
    sessions.on_uploads_done = [this] { options.channel.payload_gate->drop_buffers(); };
  }

  RunEnvironment environment(store::HistoryStore& s, ServerHooks h) {
    RunEnvironment env{s,
                       sessions,
                       clock,
                       entropy,
                       *this,
                       std::move(h),
                       options.checkpoint_dir,
                       nullptr,
                       options.storage_retry};
    // `background` is constructed after the controller and destroyed before it.
    env.background = options.overlap_checkpoints ? &background : nullptr;
    env.background_store = env.background != nullptr && commit_store ? &*commit_store : nullptr;
    env.workers = workers.get();
    env.keep_checkpoints = options.keep_checkpoints;
    return env;
  }

  std::shared_ptr<const char> alive = std::make_shared<const char>();
  asio::io_context& io;
  ServerOptions options;
  // The sessions' bulk TLS record work and the parallel chunks of the fold
  // (ServerOptions::worker_threads); null: none. Before the controller, which folds on it. A
  // TLS job holds its stream's state and work on `io`, which outlives the server.
  std::unique_ptr<WorkerPool> workers = make_workers(options.worker_threads);
  store::HistoryStore& store;
  // A second connection to the history, for the rounds the background writer commits
  // (RunEnvironment::background_store); none for an in-memory history. Used only on the
  // writer's thread, which is joined before it goes.
  std::optional<store::HistoryStore> commit_store;
  // Announcements kept back while such a commit is outstanding, and who hears them: both
  // outlive the controller, whose last pending round may release them as it goes.
  HeldAnnouncements held;
  std::map<std::uint64_t, std::function<void(const store::EventRecord&)>> listeners;
  std::uint64_t next_listener = 1;
  ServerHooks hooks;
  asio::ssl::context tls_context;
  tcp::acceptor acceptor;
  SystemClock clock;
  OpenSslEntropy entropy;
  SessionRegistry sessions;
  asio::steady_timer wakeup;    // armed for the controller's next_wakeup()
  asio::steady_timer crl_tick;  // the CRL file watcher's
  std::unique_ptr<net::SteadySleeper> own_sleeper;
  net::Sleeper& sleeper;  // the heartbeat loops' clock
  RunController controller;
  net::ConnectionTable table;  // sockets from the listener
  asio::steady_timer room;     // the accept loop's wait while `table` is full
  // After the controller: its thread is joined (a write it runs reads the controller's
  // model) before the controller goes.
  BackgroundWriter background;
  LogThrottle throttle{std::chrono::seconds(10)};
  std::size_t connections = 0;
  std::uint64_t next_serial = 1;
  bool stopping = false;
  TrafficCounters ended_sessions_traffic;
  std::uint64_t heartbeats_sent = 0;
  static std::unique_ptr<WorkerPool> make_workers(int requested) {
    const int cores = hardware_threads();
    const int threads = requested != ServerOptions::kAutoWorkerThreads ? requested
                        : cores >= 4                                   ? std::min(cores - 1, 8)
                                                                       : 0;
    return threads > 0 ? std::make_unique<WorkerPool>(static_cast<std::size_t>(threads)) : nullptr;
  }

  // EventSink: the store's events table, then every subscriber. While a round commits on
  // the writer thread, both wait for its end (held_announcements.hpp).
  void record(std::string_view kind, std::optional<std::int64_t> run,
              std::optional<std::int64_t> round, std::string_view client_id,
              std::string detail_json) override {
    store::EventRecord e;
    e.time_ms = clock.wall_ms();
    e.kind = std::string(kind);
    e.run_id = run;
    e.round = round;
    e.client_id = std::string(client_id);
    e.detail_json = std::move(detail_json);
    if (held.held()) {
      held.defer(std::move(e));
      return;
    }
    if (auto written = store.append_event(e); !written) {
      spdlog::warn("could not record event {}: {}", kind, written.error().message);
    } else {
      e.id = *written;
    }
    announce(e);
  }
  void announce(const store::EventRecord& e) override {
    if (!held.keep(e)) {
      deliver(e);
    }
  }
  void hold_announcements() override { held.hold(); }
  void release_announcements() override {
    for (const auto& e : held.release(store)) {
      deliver(e);
    }
  }
  void deliver(const store::EventRecord& e) {
    // A copy: a listener may unsubscribe (itself or another) while being called.
    const auto current = listeners;
    for (const auto& [handle, listener] : current) {
      listener(e);
    }
  }
  void event(std::string_view kind, std::string_view client_id, const nlohmann::json& detail) {
    record(kind, std::nullopt, std::nullopt, client_id, detail.dump());
  }

  // Lets the controller move the run, then sleeps until it next needs the clock. An
  // exception from the controller ends the run as failed, with the reason stored, logged
  // and sent as an event: a run never stops silently.
  void drive() {
    try {
      controller.poll();
    } catch (const std::exception& e) {
      controller.fail_active_run(std::string("internal error while driving the run: ") + e.what());
    }
    wakeup.cancel();
    const auto next = controller.next_wakeup();
    if (!next || stopping) {
      return;
    }
    wakeup.expires_at(*next);
    wakeup.async_wait([this](const error_code& ec) {
      if (!ec) {
        drive();
      }
    });
  }

  asio::awaitable<void> accept_loop();
  void admit(tcp::socket socket);  // a slot in `table` and a session, or closed at once
  asio::awaitable<void> watch_crl();
  result<std::size_t> reload_revocations();
  asio::awaitable<void> serve(tcp::socket socket, net::ConnectionTable::Ticket ticket);
  asio::awaitable<void> serve_local(std::string client_id, std::unique_ptr<net::Link> link);
  // `ticket` (null for in-process clients) is marked authenticated once HELLO is accepted.
  asio::awaitable<void> session_loop(std::shared_ptr<Session> session,
                                     net::ConnectionTable::Ticket* ticket = nullptr);
  asio::awaitable<void> heartbeats(std::shared_ptr<Session> session);
  // Gives the controller an UPDATE frame; the caller then drives the controller.
  void handle_update(Session& session, protocol::Frame& frame);
  void handle_client_error(Session& session, const protocol::Frame& frame);
};

FederationServer::FederationServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FederationServer::~FederationServer() = default;

result<std::unique_ptr<FederationServer>> FederationServer::create(asio::io_context& io,
                                                                   ServerOptions options,
                                                                   store::HistoryStore& store,
                                                                   ServerHooks hooks) {
  auto tls = tls::make_server_context(options.tls);
  if (!tls) {
    return tls.error();
  }
  std::error_code ec;
  std::filesystem::create_directories(options.checkpoint_dir, ec);
  if (ec) {
    return fail(errc::io_error, "cannot create checkpoint directory '" + options.checkpoint_dir +
                                    "': " + ec.message());
  }
  // Nobody is connected to a server that is only starting: clients a crashed process
  // left marked online are offline.
  const SystemClock clock;
  if (auto clients = store.list_clients(); clients) {
    for (const auto& c : *clients) {
      if (c.online) {
        if (auto saved = store.set_client_online(c.id, false, clock.wall_ms()); !saved) {
          return saved.error();
        }
      }
    }
  }
  // A crash between writing a round's checkpoint and committing the round left a file no
  // row references; nothing will ever read it.
  auto sweep = remove_orphan_checkpoints(store, options.checkpoint_dir);
  if (!sweep) {
    return sweep.error();
  }
  for (const auto& path : sweep->removed) {
    spdlog::info("removed orphan checkpoint {} (written, never committed)", path);
  }
  options.channel.payload_gate = std::make_shared<net::PayloadGate>(
      io.get_executor(), std::max<std::size_t>(options.max_inflight_updates, 1),
      options.large_payload_bytes, options.upload_memory_bytes);
  // Rounds handed off to the background writer commit there, through their own
  // connection, so that the io thread never waits on the commit's fsync (an in-memory
  // history has only one connection: they commit on the io thread).
  std::optional<store::HistoryStore> second;
  if (options.overlap_checkpoints && !store.in_memory()) {
    auto opened = store::HistoryStore::open_second_connection(store);
    if (!opened) {
      return opened.error();
    }
    second.emplace(std::move(*opened));
  }
  auto impl = std::make_unique<Impl>(io, std::move(options), store, std::move(second),
                                     std::move(hooks), std::move(*tls));
  return std::unique_ptr<FederationServer>(new FederationServer(std::move(impl)));
}

result<std::uint16_t> FederationServer::listen() {
  auto& s = *impl_;
  auto port = net::open_listener(s.acceptor, s.options.listen_address, s.options.port);
  if (!port) {
    return port.error();
  }
  asio::co_spawn(s.io, s.accept_loop(), asio::detached);
  if (s.options.crl_poll_interval.count() > 0 && !s.options.tls.crl_file.empty()) {
    asio::co_spawn(s.io, s.watch_crl(), asio::detached);
  }
  spdlog::info(
      "federation listener on {}:{} (TLS 1.3, client certificates required; TLS record work on "
      "{} worker thread(s) beside the io thread)",
      s.options.listen_address, *port, s.workers ? s.workers->size() : 0);
  return *port;
}

asio::awaitable<void> FederationServer::Impl::accept_loop() {
  // Out of descriptors (or buffers): accept() fails at once until something closes, so
  // wait, doubling from 10 ms to 1 s, instead of spinning and logging every failure.
  std::chrono::milliseconds pause{0};
  asio::steady_timer pause_timer(io);
  while (!stopping) {
    if (!table.has_room()) {
      // At the connection limits new connections wait in the backlog, in arrival order,
      // until a slot is given back (net/connection_table.hpp); bounded, for shutdown.
      room.expires_after(std::chrono::milliseconds(250));
      co_await room.async_wait(kNoThrow);
      continue;
    }
    auto [ec, socket] = co_await acceptor.async_accept(kNoThrow);
    if (ec) {
      if (stopping || ec == asio::error::operation_aborted) {
        break;
      }
      if (auto suppressed = throttle.admit("accept:" + ec.message(), clock.steady())) {
        spdlog::warn("accept failed: {}{}", ec.message(), suppressed_suffix(*suppressed));
      }
      if (net::is_resource_shortage(ec)) {
        pause =
            std::clamp(pause * 2, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
        pause_timer.expires_after(pause);
        co_await pause_timer.async_wait(kNoThrow);
      }
      continue;
    }
    pause = std::chrono::milliseconds(0);
    admit(std::move(socket));
    net::accept_waiting(
        acceptor, kAcceptBatch, [this] { return table.has_room(); },
        [this](tcp::socket more) { admit(std::move(more)); });
  }
}

void FederationServer::Impl::admit(tcp::socket socket) {
  net::set_no_delay(socket);
  error_code ignored;
  const auto address = socket.remote_endpoint(ignored).address().to_string();
  auto ticket = table.admit(address);
  if (!ticket) {
    if (auto suppressed = throttle.admit("refused:" + address, clock.steady())) {
      spdlog::warn("refusing a connection from {}: {}{}", address, ticket.error().message,
                   suppressed_suffix(*suppressed));
    }
    return;  // the socket closes as it goes out of scope
  }
  asio::co_spawn(io, serve(std::move(socket), std::move(*ticket)), log_session_exception);
}

asio::awaitable<void> FederationServer::Impl::serve(tcp::socket socket,
                                                    net::ConnectionTable::Ticket ticket) {
  ++connections;
  struct Release {
    std::size_t& n;
    ~Release() { --n; }
  } release{connections};
  error_code ignored;
  const auto remote = socket.remote_endpoint(ignored);
  const std::string peer = remote.address().to_string() + ":" + std::to_string(remote.port());

  TlsStream stream(std::move(socket), tls_context);
  stream.offload_to(workers.get());
  // The handshake gets its own deadline: a peer that opens a socket and says nothing
  // must not hold a connection slot. (A Watchdog, not a bare timer: an expiry queued in
  // the pass where a handshake fails must not touch this frame, which then ends at once.)
  net::Watchdog watchdog(io.get_executor(), options.handshake_timeout, [&stream] {
    error_code e;
    stream.next_layer().close(e);
  });
  auto [handshake_error] =
      co_await stream.async_handshake(asio::ssl::stream_base::server, kNoThrow);
  watchdog.disarm();
  const bool timed_out = watchdog.fired();
  // Per-connection refusals are throttled by reason, not by peer: a storm from hundreds of
  // addresses wrote one line per connection (500 KB in 13 s, storm_test.cpp).
  if (handshake_error) {
    const auto why = timed_out ? std::string("handshake timeout") : handshake_error.message();
    if (auto suppressed = throttle.admit("handshake:" + why, clock.steady())) {
      spdlog::warn("TLS handshake with {} refused: {}{}", peer, why,
                   suppressed_suffix(*suppressed));
    }
    co_return;
  }
  auto client_id = tls::peer_common_name(stream.native_handle());
  if (!client_id) {
    if (auto suppressed = throttle.admit("identity:" + client_id.error().message, clock.steady())) {
      spdlog::warn("connection from {} refused: {}{}", peer, client_id.error().message,
                   suppressed_suffix(*suppressed));
    }
    co_return;
  }
  auto session = std::make_shared<Session>();
  session->serial = next_serial++;
  session->connected_ms = clock.wall_ms();
  session->client_id = *client_id;
  session->peer = peer;
  session->certificate_serial = tls::peer_serial(stream.native_handle());
  session->link = std::make_unique<net::StreamLink<TlsStream>>(std::move(stream), options.channel);
  co_await session_loop(session, &ticket);
}

// An in-process client: no handshake, the caller vouched for the identity.
asio::awaitable<void> FederationServer::Impl::serve_local(std::string client_id,
                                                          std::unique_ptr<net::Link> link) {
  ++connections;
  struct Release {
    std::size_t& n;
    ~Release() { --n; }
  } release{connections};
  auto session = std::make_shared<Session>();
  session->serial = next_serial++;
  session->connected_ms = clock.wall_ms();
  session->client_id = std::move(client_id);
  session->peer = "in-process";
  session->link = std::move(link);
  co_await session_loop(session);
}

asio::awaitable<void> FederationServer::Impl::session_loop(std::shared_ptr<Session> session,
                                                           net::ConnectionTable::Ticket* ticket) {
  auto& channel = *session->link;
  struct CountTraffic {
    TrafficCounters& total;
    const net::Link& channel;
    ~CountTraffic() {
      total.bytes_in += channel.bytes_read();
      total.bytes_out += channel.bytes_written();
    }
  } count_traffic{ended_sessions_traffic, channel};
  const auto idle = options.channel.idle_timeout;
  // HELLO's first byte within hello_timeout, and the rest within as long again: with the
  // transfer timeout (60 s) a peer trickling its header a byte at a time held an anonymous
  // slot for a minute (tests/federation/storm_test.cpp).
  channel.set_timeouts(options.hello_timeout, options.hello_timeout);
  // Memory is earned: before HELLO a peer may send nothing but a small HELLO.
  channel.set_admission([](const protocol::FrameHeader& header) {
    if (header.type != protocol::MessageType::hello) {
      return net::Admission::refuse("expected HELLO, got " +
                                    std::string(protocol::message_type_name(header.type)));
    }
    if (header.payload_length != 0 || header.metadata_length > kMaxHelloMetadata) {
      return net::Admission::refuse("a HELLO carries no payload and at most " +
                                    std::to_string(kMaxHelloMetadata) + " bytes of metadata");
    }
    return net::Admission::accept(false);
  });
  auto first = co_await channel.read_frame();
  if (!first || first->type != protocol::MessageType::hello) {
    const auto why = first ? "got " + std::string(protocol::message_type_name(first->type))
                           : first.error().message;
    if (auto suppressed =
            throttle.admit("hello:" + session->client_id + ":" + why, clock.steady())) {
      spdlog::warn("client '{}' ({}) did not say hello: {}{}", session->client_id, session->peer,
                   why, suppressed_suffix(*suppressed));
    }
    co_return;
  }
  auto hello = protocol::parse_hello(first->metadata);
  if (!hello) {
    spdlog::warn("client '{}' sent a bad hello: {}", session->client_id, hello.error().message);
    session->link->send(
        protocol::MessageType::error,
        protocol::to_metadata(protocol::ErrorMessage{"invalid_argument", hello.error().message}));
    co_return;
  }
  session->hello = *hello;
  if (ticket != nullptr) {
    ticket->authenticated();  // certificate and HELLO: no longer an anonymous slot
  }
  channel.set_timeouts(idle, options.channel.transfer_timeout);
  // From now on a payload is at most what the run expects of this client now, and only a
  // client selected in the round in flight may hold an upload slot.
  channel.set_admission([this, id = session->client_id](const protocol::FrameHeader& header) {
    const auto allowed = controller.upload_allowance(id, header.type);
    if (header.metadata_length > allowed.max_metadata_bytes) {
      return net::Admission::refuse("a " + std::string(protocol::message_type_name(header.type)) +
                                    " with " + std::to_string(header.metadata_length) +
                                    " metadata bytes; at most " +
                                    std::to_string(allowed.max_metadata_bytes) + " expected");
    }
    if (header.payload_length > allowed.max_payload_bytes) {
      return net::Admission::refuse("a " + std::string(protocol::message_type_name(header.type)) +
                                    " with " + std::to_string(header.payload_length) +
                                    " payload bytes; at most " +
                                    std::to_string(allowed.max_payload_bytes) + " expected now");
    }
    return net::Admission::accept(allowed.in_round);
  });

  if (auto replaced = sessions.add(session)) {
    spdlog::warn("client '{}' connected again from {}; closing its previous session from {}",
                 session->client_id, session->peer, replaced->peer);
    replaced->link->close();
  }
  store::ClientRecord record;
  record.id = session->client_id;
  record.first_seen_ms = record.last_seen_ms = clock.wall_ms();
  record.samples = static_cast<std::int64_t>(hello->samples);
  record.input_shape_json = nlohmann::json(hello->input_shape).dump();
  record.capabilities_json =
      nlohmann::json{{"capabilities", hello->capabilities},
                     {"num_classes", hello->num_classes},
                     {"test_samples", hello->test_samples},
                     {"software", hello->software},
                     {"protocol", protocol::negotiated_protocol(hello->protocol_version)}}
          .dump();
  record.online = true;
  if (auto saved = store.upsert_client(record); !saved) {
    spdlog::error("could not record client '{}': {}", session->client_id, saved.error().message);
  }
  const auto version = protocol::negotiated_protocol(hello->protocol_version);
  spdlog::info("client '{}' online from {} ({} samples, protocol {}{})", session->client_id,
               session->peer, hello->samples, version,
               version < protocol::kProtocolVersion ? ", an older client" : "");
  event("client_connected", session->client_id, {{"peer", session->peer}});
  if (hooks.client_changed) {
    hooks.client_changed(session->client_id, true);
  }
  session->link->send(protocol::MessageType::welcome,
                      protocol::to_metadata(protocol::Welcome{session->client_id,
                                                              options.heartbeat_seconds, version}));
  // Heartbeats go both ways: without ours, an idle client's read deadline would end a
  // healthy session every idle_timeout.
  asio::co_spawn(io, heartbeats(session), log_session_exception);
  // After WELCOME is queued: the controller may start a round and send TRAIN at once.
  drive();

  std::string reason = "connection closed";
  while (true) {
    auto frame = co_await channel.read_frame();
    if (!frame) {
      reason = frame.error().message;
      break;
    }
    if (frame->type == protocol::MessageType::heartbeat) {
      continue;
    }
    if (frame->type == protocol::MessageType::update) {
      handle_update(*session, *frame);
      // The update is folded in: its buffer serves the next upload (net/payload_gate.hpp).
      // Handed back before the controller moves on: if this was the round's last update,
      // closing the round frees the gate's kept buffers before the aggregation allocates the
      // next model (with the buffer still held here, a 10M-parameter round peaked 40 MB
      // higher).
      options.channel.payload_gate->recycle(std::move(frame->payload));
      drive();
      continue;
    }
    if (frame->type == protocol::MessageType::error) {
      handle_client_error(*session, *frame);
      continue;
    }
    if (frame->type == protocol::MessageType::secagg_keys ||
        frame->type == protocol::MessageType::secagg_shares ||
        frame->type == protocol::MessageType::secagg_masked ||
        frame->type == protocol::MessageType::secagg_signed ||
        frame->type == protocol::MessageType::secagg_revealed) {
      controller.on_secure_message(session->client_id, *frame);
      drive();
      continue;
    }
    if (frame->type == protocol::MessageType::feature_stats) {
      controller.on_feature_stats(session->client_id, *frame);
      drive();
      continue;
    }
    if (frame->type == protocol::MessageType::evaluation) {
      controller.on_evaluation(session->client_id, *frame);
      drive();
      continue;
    }
    if (frame->type == protocol::MessageType::goodbye) {
      reason = "client said goodbye";
      break;
    }
    reason = "unexpected " + std::string(protocol::message_type_name(frame->type)) + " message";
    session->link->send(protocol::MessageType::error,
                        protocol::to_metadata(protocol::ErrorMessage{"invalid_argument", reason}));
    break;
  }
  channel.close();
  sleeper.cancel(session.get());  // its heartbeats stop now, not one interval later
  if (sessions.remove(*session)) {
    if (auto saved = store.set_client_online(session->client_id, false, clock.wall_ms()); !saved) {
      spdlog::error("could not record client '{}' offline: {}", session->client_id,
                    saved.error().message);
    }
    controller.on_session_lost(session->client_id, reason);
    drive();
    if (hooks.client_changed) {
      hooks.client_changed(session->client_id, false);
    }
  }
  spdlog::info("client '{}' offline: {}", session->client_id, reason);
  event("client_disconnected", session->client_id, {{"reason", reason}});
}

asio::awaitable<void> FederationServer::Impl::heartbeats(std::shared_ptr<Session> session) {
  const std::chrono::milliseconds interval =
      std::chrono::seconds(std::max<std::uint32_t>(options.heartbeat_seconds, 1));
  while (!stopping && session->link->is_open()) {
    // Awaited into a variable: GCC 12 miscompiles `if (!co_await ...)` here.
    const bool slept = co_await sleeper.sleep_for(interval, session.get());
    if (!slept || stopping || !session->link->is_open()) {
      break;
    }
    session->link->send(protocol::MessageType::heartbeat, "{}");
    ++heartbeats_sent;
  }
}

// Polls the CRL file's modification time (and size): cheap, portable, and a CA that
// replaces the file atomically (rename) or rewrites it is seen either way. A reload that
// fails (a half-written file) is retried at the next change or tick.
asio::awaitable<void> FederationServer::Impl::watch_crl() {
  auto& tick = crl_tick;
  auto stamp = [this]() -> std::pair<std::filesystem::file_time_type, std::uintmax_t> {
    std::error_code ec;
    const auto when = std::filesystem::last_write_time(options.tls.crl_file, ec);
    const auto size = std::filesystem::file_size(options.tls.crl_file, ec);
    return {when, ec ? 0 : size};
  };
  auto seen = stamp();
  bool pending = false;
  while (!stopping) {
    tick.expires_after(options.crl_poll_interval);
    auto [ec] = co_await tick.async_wait(kNoThrow);
    if (ec || stopping) {
      break;
    }
    const auto now = stamp();
    if (now == seen && !pending) {
      continue;
    }
    seen = now;
    auto closed = reload_revocations();
    pending = !closed;
    if (!closed) {
      spdlog::error("CRL file changed but cannot be loaded (the previous list stays): {}",
                    closed.error().message);
    }
  }
}

result<std::size_t> FederationServer::Impl::reload_revocations() {
  auto revoked = tls::reload_revocations(tls_context, options.tls);
  if (!revoked) {
    return revoked.error();
  }
  std::size_t closed = 0;
  for (const auto& [id, session] : sessions.all()) {
    if (!session->certificate_serial.empty() && revoked->count(session->certificate_serial) != 0) {
      spdlog::warn("client '{}': its certificate (serial {}) is revoked; closing its session",
                   session->client_id, session->certificate_serial);
      event("client_revoked", session->client_id, {{"serial", session->certificate_serial}});
      session->link->close();
      ++closed;
    }
  }
  spdlog::info("CRL reloaded: {} revoked certificate(s), {} live session(s) closed",
               revoked->size(), closed);
  return closed;
}

// A client says it could not do what it was asked (typically: local training failed).
// The message is the client's, so it is cut short before it reaches logs and events.
void FederationServer::Impl::handle_client_error(Session& session, const protocol::Frame& frame) {
  constexpr std::size_t kMaxReason = 300;
  auto message = protocol::parse_error_message(frame.metadata);
  std::string said = message ? message->message : "(unreadable error message)";
  if (said.size() > kMaxReason) {
    said.resize(kMaxReason);
    said += "...";
  }
  controller.on_client_error(session.client_id, said);
  drive();
}

void FederationServer::Impl::handle_update(Session& session, protocol::Frame& frame) {
  auto report = protocol::parse_update_report(frame.metadata);
  if (!report) {
    spdlog::warn("client '{}': malformed update refused: {}", session.client_id,
                 report.error().message);
    event("update_refused", session.client_id, {{"reason", report.error().message}});
    session.link->send(
        protocol::MessageType::error,
        protocol::to_metadata(protocol::ErrorMessage{"invalid_argument", report.error().message}));
    // Still the client's answer for its round: a round must not wait for its deadline on
    // a client that already sent (a broken) update.
    controller.on_client_error(session.client_id,
                               "malformed update refused: " + report.error().message);
    return;
  }
  const std::uint64_t bytes =
      protocol::kFrameHeaderSize + frame.metadata.size() + frame.payload.size();
  if (report->encoding != protocol::UpdateEncoding::f32) {
    // A compressed step against the round's global model. The payload is checked whole
    // here (every malformation is refused before anything is folded), then decoded a chunk
    // at a time straight into the round's sum (Round::on_update): no parameter vector is
    // built for it unless its strategy needs every update whole.
    const auto global = controller.round_global();
    if (global == nullptr) {
      controller.on_update(session.client_id, *report, {}, bytes);  // no round: refused there
      return;
    }
    auto step = protocol::StepDecoder::open(report->encoding, frame.payload, global->size());
    if (!step) {
      spdlog::warn("client '{}': malformed update refused: {}", session.client_id,
                   step.error().message);
      event("update_refused", session.client_id, {{"reason", step.error().message}});
      session.link->send(
          protocol::MessageType::error,
          protocol::to_metadata(protocol::ErrorMessage{"invalid_argument", step.error().message}));
      controller.on_client_error(session.client_id,
                                 "malformed update refused: " + step.error().message);
      return;
    }
    controller.on_update(session.client_id, *report, {}, bytes, {}, &*step);
    return;
  }
  auto floats = protocol::payload_floats(frame.payload);
  std::span<const float> params = floats ? *floats : std::span<const float>();
  std::span<const float> control;
  if (report->scaffold) {
    // SCAFFOLD: the parameters, then as many values of the control variate's change; an odd
    // count leaves the halves unequal and the round rejects the update for its shape.
    const std::size_t half = (params.size() + 1) / 2;
    control = params.subspan(half);
    params = params.first(half);
  }
  controller.on_update(session.client_id, *report, params, bytes, control);
  // The caller drives the controller once the payload is back with the gate.
}

result<std::int64_t> FederationServer::start_run(const RunConfig& config) {
  auto& s = *impl_;
  auto run = s.controller.start_run(config);
  if (run) {
    s.drive();
  }
  return run;
}

result<void> FederationServer::resume_runs() {
  auto& s = *impl_;
  auto resumed = s.controller.resume_runs();
  s.drive();
  return resumed;
}

result<std::size_t> FederationServer::reload_revocations() {
  return impl_->reload_revocations();
}

void FederationServer::shutdown() {
  auto& s = *impl_;
  if (s.stopping) {
    return;
  }
  s.stopping = true;
  error_code ignored;
  s.acceptor.close(ignored);
  s.controller.shutdown();
  s.wakeup.cancel();
  s.crl_tick.cancel();
  s.room.cancel();
  s.options.channel.payload_gate->close();
  for (const auto& [id, session] : s.sessions.all()) {
    session->link->close();
    s.sleeper.cancel(session.get());
  }
  spdlog::info("federation server stopping");
}

void FederationServer::attach_local_session(std::string client_id,
                                            std::unique_ptr<net::Link> link) {
  auto& s = *impl_;
  if (s.stopping || s.connections >= s.options.max_connections) {
    spdlog::warn("refusing in-process client '{}': {}", client_id,
                 s.stopping ? "shutting down" : "connection limit reached");
    return;  // the link closes as it goes out of scope; the client sees end of stream
  }
  asio::co_spawn(s.io, s.serve_local(std::move(client_id), std::move(link)), log_session_exception);
}

result<void> FederationServer::stop_run(std::int64_t run_id) {
  auto& s = *impl_;
  auto stopped = s.controller.stop_run(run_id);
  s.drive();
  return stopped;
}

result<void> FederationServer::pause_run(std::int64_t run_id) {
  auto& s = *impl_;
  auto paused = s.controller.pause_run(run_id);
  s.drive();
  return paused;
}

result<void> FederationServer::resume_run(std::int64_t run_id) {
  auto& s = *impl_;
  auto resumed = s.controller.resume_run(run_id);
  s.drive();
  return resumed;
}

result<std::int64_t> FederationServer::advance_round(std::int64_t run_id) {
  auto& s = *impl_;
  auto next = s.controller.advance_round(run_id);
  if (next) {
    s.drive();
  }
  return next;
}

std::uint64_t FederationServer::subscribe_events(
    std::function<void(const store::EventRecord&)> listener) {
  auto& s = *impl_;
  const auto handle = s.next_listener++;
  s.listeners.emplace(handle, std::move(listener));
  return handle;
}

void FederationServer::unsubscribe_events(std::uint64_t handle) {
  impl_->listeners.erase(handle);
}

ServerStatus FederationServer::status() const {
  const auto& s = *impl_;
  ServerStatus out;
  out.run_active = s.controller.run_active();
  out.active_run_id = s.controller.active_run_id();
  out.active_round = s.controller.active_round();
  out.waiting_for_admin = s.controller.phase() == RunPhase::waiting_for_admin;
  out.storage_hold = s.controller.storage_hold();
  out.online_clients = s.sessions.size();
  out.connections = s.connections;
  return out;
}

std::vector<SessionInfo> FederationServer::sessions() const {
  const auto& s = *impl_;
  std::vector<SessionInfo> out;
  out.reserve(s.sessions.size());
  for (const auto& [id, session] : s.sessions.all()) {
    SessionInfo info;
    info.client_id = id;
    info.peer = session->peer;
    info.connected_ms = session->connected_ms;
    info.training = s.controller.is_training(id);
    out.push_back(std::move(info));
  }
  return out;
}

TrafficCounters FederationServer::traffic() const {
  const auto& s = *impl_;
  TrafficCounters out = s.ended_sessions_traffic;
  for (const auto& [id, session] : s.sessions.all()) {
    out.bytes_in += session->link->bytes_read();
    out.bytes_out += session->link->bytes_written();
  }
  return out;
}

std::size_t FederationServer::online_clients() const noexcept {
  return impl_->sessions.size();
}
bool FederationServer::run_active() const noexcept {
  return impl_->controller.run_active();
}

}  // namespace fedcore::federation
