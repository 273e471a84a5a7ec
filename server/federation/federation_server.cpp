#include "federation/federation_server.hpp"

#include <algorithm>
#include <filesystem>
#include <map>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include "data/csv.hpp"
#include "data/fashion_mnist.hpp"
#include "federation/aggregate.hpp"
#include "federation/round.hpp"
#include "model/param_io.hpp"
#include "model/trainer.hpp"
#include "net/listener.hpp"
#include "net/outbox.hpp"
#include "net/payload_gate.hpp"
#include "util/checksum.hpp"
#include "util/rng.hpp"

namespace fedcore::server {
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using net::TlsStream;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string fresh_nonce() {
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

std::string rejection_code_of(const Round& round, const std::string& client_id) {
  for (const auto& o : round.outcomes()) {
    if (o.client_id == client_id) {
      return o.reason_code;
    }
  }
  return "other";
}

// A CSV file, or "fashion-mnist[:DIR]" for that data set's test split.
result<data::Dataset> load_server_test_set(const RunConfig& config) {
  const std::string& name = config.server_test_set;
  constexpr std::string_view kFashion = "fashion-mnist";
  if (name == kFashion || name.starts_with(std::string(kFashion) + ":")) {
    const auto dir = name.size() > kFashion.size() ? name.substr(kFashion.size() + 1)
                                                   : data::default_fashion_mnist_dir();
    auto loaded = data::load_fashion_mnist(dir);
    if (!loaded) {
      return loaded.error();
    }
    return std::move(loaded->test);
  }
  return data::load_csv(name, {.label_column = config.label_column});
}

// Exceptions end only that connection (STYLE.md habit 3).
void log_session_exception(std::exception_ptr e) {
  if (e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      spdlog::error("session ended by an unexpected exception: {}", ex.what());
    }
  }
}

store::ResultStatus to_store(ClientStatus s) {
  switch (s) {
    case ClientStatus::ok:
      return store::ResultStatus::ok;
    case ClientStatus::rejected:
      return store::ResultStatus::rejected;
    case ClientStatus::timeout:
      return store::ResultStatus::timeout;
    case ClientStatus::dropped:
      return store::ResultStatus::dropped;
  }
  return store::ResultStatus::dropped;
}

}  // namespace

// A session's connection, whatever carries it: mutual TLS for real clients, a local
// socket for fedcore-sim's in-process clients. The session code sees only this.
class Link {
 public:
  virtual ~Link() = default;
  virtual asio::awaitable<result<protocol::Frame>> read_frame() = 0;
  virtual void set_timeouts(std::chrono::milliseconds idle,
                            std::chrono::milliseconds transfer) noexcept = 0;
  // Queued behind the link's one writer (net/outbox.hpp).
  virtual void send(protocol::MessageType type, std::string metadata,
                    net::SharedPayload payload = nullptr) = 0;
  virtual void close() noexcept = 0;
  virtual std::uint64_t bytes_read() const noexcept = 0;
  virtual std::uint64_t bytes_written() const noexcept = 0;
};

template <class Stream>
class StreamLink final : public Link {
 public:
  StreamLink(Stream stream, const net::ChannelOptions& options)
      : channel_(std::make_shared<net::FrameChannel<Stream>>(std::move(stream), options)),
        outbox_(channel_) {}
  asio::awaitable<result<protocol::Frame>> read_frame() override { return channel_->read_frame(); }
  void set_timeouts(std::chrono::milliseconds idle,
                    std::chrono::milliseconds transfer) noexcept override {
    channel_->set_timeouts(idle, transfer);
  }
  void send(protocol::MessageType type, std::string metadata, net::SharedPayload payload) override {
    outbox_.send(type, std::move(metadata), std::move(payload));
  }
  void close() noexcept override { channel_->close(); }
  std::uint64_t bytes_read() const noexcept override { return channel_->bytes_read(); }
  std::uint64_t bytes_written() const noexcept override { return channel_->bytes_written(); }

 private:
  std::shared_ptr<net::FrameChannel<Stream>> channel_;
  net::Outbox<Stream> outbox_;
};

struct Session {
  std::uint64_t serial = 0;
  std::string client_id;
  std::string peer;  // address, for logs
  std::int64_t connected_ms = 0;
  protocol::Hello hello;
  std::unique_ptr<Link> link;
};

struct FederationServer::Impl {
  Impl(asio::io_context& io_context, ServerOptions o, store::HistoryStore& s, ServerHooks h,
       asio::ssl::context tls)
      : io(io_context),
        options(std::move(o)),
        store(s),
        hooks(std::move(h)),
        tls_context(std::move(tls)),
        acceptor(io_context),
        round_wakeup(io_context),
        client_wakeup(io_context),
        admin_wakeup(io_context) {}

  asio::io_context& io;
  ServerOptions options;
  store::HistoryStore& store;
  ServerHooks hooks;
  asio::ssl::context tls_context;
  tcp::acceptor acceptor;
  std::map<std::string, std::shared_ptr<Session>> sessions;
  std::size_t connections = 0;
  std::uint64_t next_serial = 1;
  bool stopping = false;
  bool run_active = false;
  Round* active_round = nullptr;
  std::int64_t active_run_id = 0;
  asio::steady_timer round_wakeup;   // cancelled when the active round may be complete
  asio::steady_timer client_wakeup;  // cancelled when a client comes online
  asio::steady_timer admin_wakeup;   // cancelled by stop_run() and advance_round()
  // The active run's admin state. stop_run() records the run as stopped at once and sets
  // stop_requested; the loop notices when it wakes and leaves without recording more.
  bool stop_requested = false;
  bool active_manual = false;
  bool round_requested = false;  // manual runs: from advance_round() to the round's end
  bool waiting_for_admin = false;
  std::map<std::uint64_t, std::function<void(const store::EventRecord&)>> listeners;
  std::uint64_t next_listener = 1;
  TrafficCounters ended_sessions_traffic;

  bool halted() const noexcept { return stopping || stop_requested; }

  void event(const std::string& kind, std::optional<std::int64_t> run,
             std::optional<std::int64_t> round, const std::string& client,
             nlohmann::json detail = nlohmann::json::object()) {
    store::EventRecord e;
    e.time_ms = now_ms();
    e.kind = kind;
    e.run_id = run;
    e.round = round;
    e.client_id = client;
    e.detail_json = detail.dump();
    if (auto written = store.append_event(e); !written) {
      spdlog::warn("could not record event {}: {}", kind, written.error().message);
    } else {
      e.id = *written;
    }
    // A copy: a listener may unsubscribe (itself or another) while being called.
    const auto current = listeners;
    for (const auto& [handle, listener] : current) {
      listener(e);
    }
  }

  asio::awaitable<void> accept_loop();
  asio::awaitable<void> serve(tcp::socket socket);
  asio::awaitable<void> serve_local(std::string client_id, net::LocalStream stream);
  asio::awaitable<void> session_loop(std::shared_ptr<Session> session);
  void handle_update(Session& session, protocol::Frame& frame);
  void handle_client_error(Session& session, const protocol::Frame& frame);
  asio::awaitable<void> run_loop(store::RunRecord run, RunConfig config);
  asio::awaitable<bool> wait_for_clients(const RunConfig& config, const model::ModelSpec* spec);
  std::vector<std::shared_ptr<Session>> eligible(const model::ModelSpec* spec) const;
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
  if (auto clients = store.list_clients(); clients) {
    for (const auto& c : *clients) {
      if (c.online) {
        store.set_client_online(c.id, false, now_ms());
      }
    }
  }
  options.channel.payload_gate = std::make_shared<net::PayloadGate>(
      io.get_executor(), std::max<std::size_t>(options.max_inflight_updates, 1),
      options.large_payload_bytes);
  auto impl =
      std::make_unique<Impl>(io, std::move(options), store, std::move(hooks), std::move(*tls));
  return std::unique_ptr<FederationServer>(new FederationServer(std::move(impl)));
}

result<std::uint16_t> FederationServer::listen() {
  auto& s = *impl_;
  auto port = net::open_listener(s.acceptor, s.options.listen_address, s.options.port);
  if (!port) {
    return port.error();
  }
  asio::co_spawn(s.io, s.accept_loop(), asio::detached);
  spdlog::info("federation listener on {}:{} (TLS 1.3, client certificates required)",
               s.options.listen_address, *port);
  return *port;
}

asio::awaitable<void> FederationServer::Impl::accept_loop() {
  while (!stopping) {
    auto [ec, socket] = co_await acceptor.async_accept(kNoThrow);
    if (ec) {
      if (stopping || ec == asio::error::operation_aborted) {
        break;
      }
      spdlog::warn("accept failed: {}", ec.message());
      continue;
    }
    if (connections >= options.max_connections) {
      spdlog::warn("refusing a connection: {} connections open (limit)", connections);
      continue;  // the socket closes as it goes out of scope
    }
    asio::co_spawn(io, serve(std::move(socket)), log_session_exception);
  }
}

asio::awaitable<void> FederationServer::Impl::serve(tcp::socket socket) {
  ++connections;
  struct Release {
    std::size_t& n;
    ~Release() { --n; }
  } release{connections};
  error_code ignored;
  const auto remote = socket.remote_endpoint(ignored);
  const std::string peer = remote.address().to_string() + ":" + std::to_string(remote.port());

  TlsStream stream(std::move(socket), tls_context);
  // The handshake gets its own deadline: a peer that opens a socket and says nothing
  // must not hold a connection slot.
  asio::steady_timer watchdog(io);
  watchdog.expires_after(options.handshake_timeout);
  bool timed_out = false;
  watchdog.async_wait([&](const error_code& ec) {
    if (!ec) {
      timed_out = true;
      error_code e;
      stream.next_layer().close(e);
    }
  });
  auto [handshake_error] =
      co_await stream.async_handshake(asio::ssl::stream_base::server, kNoThrow);
  watchdog.cancel();
  if (handshake_error) {
    spdlog::warn("TLS handshake with {} refused: {}", peer,
                 timed_out ? "handshake timeout" : handshake_error.message());
    co_return;
  }
  auto client_id = tls::peer_common_name(stream.native_handle());
  if (!client_id) {
    spdlog::warn("connection from {} refused: {}", peer, client_id.error().message);
    co_return;
  }
  auto session = std::make_shared<Session>();
  session->serial = next_serial++;
  session->connected_ms = now_ms();
  session->client_id = *client_id;
  session->peer = peer;
  session->link = std::make_unique<StreamLink<TlsStream>>(std::move(stream), options.channel);
  co_await session_loop(session);
}

// An in-process client: no handshake, the caller vouched for the identity.
asio::awaitable<void> FederationServer::Impl::serve_local(std::string client_id,
                                                          net::LocalStream stream) {
  ++connections;
  struct Release {
    std::size_t& n;
    ~Release() { --n; }
  } release{connections};
  auto session = std::make_shared<Session>();
  session->serial = next_serial++;
  session->connected_ms = now_ms();
  session->client_id = std::move(client_id);
  session->peer = "in-process";
  session->link =
      std::make_unique<StreamLink<net::LocalStream>>(std::move(stream), options.channel);
  co_await session_loop(session);
}

asio::awaitable<void> FederationServer::Impl::session_loop(std::shared_ptr<Session> session) {
  auto& channel = *session->link;
  struct CountTraffic {
    TrafficCounters& total;
    const Link& channel;
    ~CountTraffic() {
      total.bytes_in += channel.bytes_read();
      total.bytes_out += channel.bytes_written();
    }
  } count_traffic{ended_sessions_traffic, channel};
  const auto idle = options.channel.idle_timeout;
  channel.set_timeouts(options.hello_timeout, options.channel.transfer_timeout);
  auto first = co_await channel.read_frame();
  if (!first || first->type != protocol::MessageType::hello) {
    spdlog::warn("client '{}' ({}) did not say hello: {}", session->client_id, session->peer,
                 first ? "got " + std::string(protocol::message_type_name(first->type))
                       : first.error().message);
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
  channel.set_timeouts(idle, options.channel.transfer_timeout);

  if (auto old = sessions.find(session->client_id); old != sessions.end()) {
    spdlog::warn("client '{}' connected again from {}; closing its previous session from {}",
                 session->client_id, session->peer, old->second->peer);
    old->second->link->close();
  }
  sessions[session->client_id] = session;
  store::ClientRecord record;
  record.id = session->client_id;
  record.first_seen_ms = record.last_seen_ms = now_ms();
  record.samples = static_cast<std::int64_t>(hello->samples);
  record.input_shape_json = nlohmann::json(hello->input_shape).dump();
  record.capabilities_json = nlohmann::json{
      {"capabilities", hello->capabilities},
      {"num_classes", hello->num_classes},
      {"test_samples", hello->test_samples},
      {"software",
       hello->software}}.dump();
  record.online = true;
  if (auto saved = store.upsert_client(record); !saved) {
    spdlog::error("could not record client '{}': {}", session->client_id, saved.error().message);
  }
  spdlog::info("client '{}' online from {} ({} samples)", session->client_id, session->peer,
               hello->samples);
  event("client_connected", std::nullopt, std::nullopt, session->client_id,
        {{"peer", session->peer}});
  if (hooks.client_changed) {
    hooks.client_changed(session->client_id, true);
  }
  client_wakeup.cancel();
  session->link->send(
      protocol::MessageType::welcome,
      protocol::to_metadata(protocol::Welcome{session->client_id, options.heartbeat_seconds}));

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
      continue;
    }
    if (frame->type == protocol::MessageType::error) {
      handle_client_error(*session, *frame);
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
  const bool current =
      sessions.count(session->client_id) && sessions[session->client_id] == session;
  if (current) {
    sessions.erase(session->client_id);
    if (auto saved = store.set_client_online(session->client_id, false, now_ms()); !saved) {
      spdlog::error("could not record client '{}' offline: {}", session->client_id,
                    saved.error().message);
    }
    if (active_round != nullptr && active_round->is_selected(session->client_id)) {
      active_round->on_dropped(session->client_id, "connection lost: " + reason);
      round_wakeup.cancel();
    }
    if (hooks.client_changed) {
      hooks.client_changed(session->client_id, false);
    }
  }
  spdlog::info("client '{}' offline: {}", session->client_id, reason);
  event("client_disconnected", std::nullopt, std::nullopt, session->client_id,
        {{"reason", reason}});
}

// A client says it could not do what it was asked (typically: local training failed).
// For a selected client that has not answered, that is its answer for the round: recorded
// as dropped with the client's words, so the round closes as soon as everyone answered
// instead of waiting for the deadline. The session stays up: the site may well train the
// next round. The message is the client's, so it is cut short before it reaches logs.
void FederationServer::Impl::handle_client_error(Session& session, const protocol::Frame& frame) {
  constexpr std::size_t kMaxReason = 300;
  auto message = protocol::parse_error_message(frame.metadata);
  std::string said = message ? message->message : "(unreadable error message)";
  if (said.size() > kMaxReason) {
    said.resize(kMaxReason);
    said += "...";
  }
  if (active_round == nullptr || !active_round->is_selected(session.client_id) ||
      active_round->has_answered(session.client_id)) {
    spdlog::warn("client '{}' reported an error outside its round: {}", session.client_id, said);
    return;
  }
  const auto run = active_round->settings().run_id;
  const auto round = active_round->settings().round;
  spdlog::warn("run {} round {}: client '{}' could not train: {}", run, round, session.client_id,
               said);
  active_round->on_dropped(session.client_id, "could not train: " + said);
  event("training_failed", run, round, session.client_id, {{"reason", said}});
  if (active_round->all_answered()) {
    round_wakeup.cancel();
  }
}

void FederationServer::Impl::handle_update(Session& session, protocol::Frame& frame) {
  auto report = protocol::parse_update_report(frame.metadata);
  if (!report) {
    spdlog::warn("client '{}': malformed update refused: {}", session.client_id,
                 report.error().message);
    event("update_refused", std::nullopt, std::nullopt, session.client_id,
          {{"reason", report.error().message}});
    session.link->send(
        protocol::MessageType::error,
        protocol::to_metadata(protocol::ErrorMessage{"invalid_argument", report.error().message}));
    return;
  }
  auto floats = protocol::payload_floats(frame.payload);
  const std::span<const float> params = floats ? *floats : std::span<const float>();
  const std::uint64_t bytes =
      protocol::kFrameHeaderSize + frame.metadata.size() + frame.payload.size();
  if (active_round == nullptr) {
    event("update_stale", report->run_id, report->round, session.client_id,
          {{"reason", "no round in progress"}});
    spdlog::warn("client '{}': update for run {} round {} refused: no round in progress",
                 session.client_id, report->run_id, report->round);
    return;
  }
  std::string why;
  const auto verdict = active_round->on_update(session.client_id, *report, params, bytes, &why);
  const auto run = active_round->settings().run_id;
  const auto round = active_round->settings().round;
  switch (verdict) {
    case UpdateVerdict::accepted:
      spdlog::info("run {} round {}: update from '{}' accepted ({} samples, loss {:.4f})", run,
                   round, session.client_id, report->samples, report->loss);
      event("update_accepted", run, round, session.client_id,
            {{"samples", report->samples}, {"bytes", bytes}});
      break;
    case UpdateVerdict::rejected:
      spdlog::warn("run {} round {}: update from '{}' rejected: {}", run, round, session.client_id,
                   why);
      event(
          "update_rejected", run, round, session.client_id,
          {{"reason", why}, {"reason_code", rejection_code_of(*active_round, session.client_id)}});
      break;
    case UpdateVerdict::stale:
      spdlog::warn("run {} round {}: update from '{}' refused: {}", run, round, session.client_id,
                   why);
      event("update_stale", run, round, session.client_id,
            {{"reason", why}, {"reason_code", "stale"}});
      break;
  }
  if (active_round->all_answered()) {
    round_wakeup.cancel();
  }
}

std::vector<std::shared_ptr<Session>> FederationServer::Impl::eligible(
    const model::ModelSpec* spec) const {
  std::vector<std::shared_ptr<Session>> out;
  for (const auto& [id, session] : sessions) {
    if (spec != nullptr && spec->complete() &&
        (session->hello.input_shape != spec->input_shape ||
         session->hello.num_classes > spec->num_classes)) {
      continue;  // a client whose data does not fit this model cannot train it
    }
    out.push_back(session);
  }
  return out;
}

asio::awaitable<bool> FederationServer::Impl::wait_for_clients(const RunConfig& config,
                                                               const model::ModelSpec* spec) {
  const auto needed = static_cast<std::size_t>(std::max<std::int64_t>(config.min_clients, 1));
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<std::int64_t>(config.wait_for_clients_s * 1000));
  while (!halted() && eligible(spec).size() < needed &&
         std::chrono::steady_clock::now() < deadline) {
    client_wakeup.expires_at(deadline);
    co_await client_wakeup.async_wait(kNoThrow);
  }
  co_return eligible(spec).size() >= needed;
}

asio::awaitable<void> FederationServer::Impl::run_loop(store::RunRecord run, RunConfig config) {
  run_active = true;
  active_run_id = run.id;
  stop_requested = false;
  active_manual = config.manual;
  round_requested = false;
  struct Done {
    Impl& s;
    ~Done() {
      s.run_active = false;
      s.active_run_id = 0;
      s.active_round = nullptr;
      s.waiting_for_admin = false;
      s.stop_requested = false;
    }
  } done{*this};
  auto end_run = [&](store::RunState state, const std::string& why) {
    if (auto saved = store.set_run_state(run.id, state, why, now_ms()); !saved) {
      spdlog::error("run {}: could not record state: {}", run.id, saved.error().message);
    }
    event("run_ended", run.id, std::nullopt, "",
          {{"state", std::string(store::to_string(state))}, {"reason", why}});
    if (hooks.run_ended) {
      hooks.run_ended(run.id, state);
    }
  };

  // The model's input shape and classes may come from the clients' declared schema.
  model::ModelSpec spec = config.model;
  if (!spec.complete()) {
    if (!co_await wait_for_clients(config, nullptr)) {
      if (!halted()) {
        end_run(store::RunState::paused, "not enough clients online to learn the data schema");
      }
      co_return;
    }
    const auto& hello = eligible(nullptr).front()->hello;
    auto completed = model::complete_spec(spec, hello.input_shape, hello.num_classes);
    if (!completed) {
      end_run(store::RunState::failed, completed.error().message);
      co_return;
    }
    spec = *completed;
  }
  auto built = model::build_model(spec);
  if (!built) {
    end_run(store::RunState::failed, built.error().message);
    co_return;
  }
  // The global model is one shared, immutable buffer: the TRAIN frames of a round all
  // send it as it is, and each round replaces it with the strategy's output (moved, not
  // copied). A Model is kept only when the server evaluates.
  std::optional<model::Model> eval_model(std::move(*built));
  eval_model->initialize(config.seed);
  const model::ParamLayout layout = eval_model->layout();
  std::shared_ptr<const std::vector<float>> global = std::make_shared<const std::vector<float>>(
      eval_model->params().begin(), eval_model->params().end());
  // Resume: the last committed round's checkpoint is the global model.
  if (auto latest = store.latest_checkpoint(run.id); latest && *latest) {
    auto bundle = model::load_params((*latest)->ref.path);
    if (!bundle || bundle->layout.fingerprint() != layout.fingerprint()) {
      end_run(store::RunState::failed,
              "cannot resume from checkpoint " + (*latest)->ref.path + ": " +
                  (bundle ? "layout differs from the run's model" : bundle.error().message));
      co_return;
    }
    global = std::make_shared<const std::vector<float>>(std::move(bundle->params));
    spdlog::info("run {}: resuming after round {} from {}", run.id, (*latest)->round,
                 (*latest)->ref.path);
  }
  auto strategy = make_strategy(config.strategy, layout.total());
  if (!strategy) {
    end_run(store::RunState::failed, strategy.error().message);
    co_return;
  }
  std::optional<data::Dataset> server_test;
  if (!config.server_test_set.empty()) {
    auto loaded = load_server_test_set(config);
    if (!loaded) {
      end_run(store::RunState::failed, "server test set: " + loaded.error().message);
      co_return;
    }
    server_test = std::move(*loaded);
  } else {
    eval_model.reset();
  }
  const std::string spec_json = nlohmann::json(spec).dump();
  const auto run_dir =
      std::filesystem::path(options.checkpoint_dir) / ("run-" + std::to_string(run.id));
  std::filesystem::create_directories(run_dir);

  std::int32_t attempt = 0;
  while (!halted()) {
    auto current = store.get_run(run.id);
    if (!current) {
      spdlog::error("run {}: {}", run.id, current.error().message);
      co_return;
    }
    const std::int64_t round_no = current->last_round + 1;
    if (round_no > config.rounds) {
      spdlog::info("run {} finished after {} rounds", run.id, config.rounds);
      end_run(store::RunState::finished, "");
      co_return;
    }
    if (config.manual && !round_requested) {
      spdlog::info("run {}: round {} waits for an admin (manual run)", run.id, round_no);
      waiting_for_admin = true;
      while (!halted() && !round_requested) {
        admin_wakeup.expires_at(std::chrono::steady_clock::time_point::max());
        co_await admin_wakeup.async_wait(kNoThrow);
      }
      waiting_for_admin = false;
      if (halted()) {
        co_return;
      }
    }
    if (!co_await wait_for_clients(config, &spec)) {
      if (!halted()) {
        end_run(store::RunState::paused, "fewer than " + std::to_string(config.min_clients) +
                                             " clients online after waiting " +
                                             std::to_string(config.wait_for_clients_s) + " s");
      }
      co_return;
    }
    // Seeded sampling: sort the eligible ids, shuffle with (seed, round, attempt).
    auto candidates = eligible(&spec);
    std::sort(candidates.begin(), candidates.end(),
              [](const auto& a, const auto& b) { return a->client_id < b->client_id; });
    Rng rng(config.seed * 1000003ULL + static_cast<std::uint64_t>(round_no) * 7919ULL +
            static_cast<std::uint64_t>(attempt));
    rng.shuffle(std::span(candidates));
    candidates.resize(clients_to_sample(config, candidates.size()));

    std::map<std::string, std::string> nonces;
    for (const auto& c : candidates) {
      nonces[c->client_id] = fresh_nonce();
    }
    (*strategy)->begin_round(*global);
    RoundSettings settings;
    settings.run_id = run.id;
    settings.round = round_no;
    settings.min_clients = static_cast<std::size_t>(config.min_clients);
    settings.checks.max_update_norm = config.max_update_norm;
    Round round(settings, nonces, *global, layout, **strategy);
    active_round = &round;
    const auto started = now_ms();
    spdlog::info("run {} round {}: training on {} client(s)", run.id, round_no, candidates.size());
    event("round_started", run.id, round_no, "",
          {{"clients", candidates.size()}, {"attempt", attempt + 1}});
    for (const auto& c : candidates) {
      protocol::TrainRequest request;
      request.run_id = run.id;
      request.round = round_no;
      request.nonce = nonces[c->client_id];
      request.model_spec_json = spec_json;
      request.layout_fingerprint = layout.fingerprint_hex();
      request.settings = {config.local_epochs, config.batch_size, config.optimizer_json,
                          config.proximal_mu, config.seed + static_cast<std::uint64_t>(round_no)};
      request.evaluate = config.federated_evaluation;
      auto metadata = protocol::to_metadata(request);
      round.set_bytes_down(c->client_id, protocol::kFrameHeaderSize + metadata.size() +
                                             global->size() * sizeof(float));
      c->link->send(protocol::MessageType::train, std::move(metadata), global);
    }
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(static_cast<std::int64_t>(config.round_timeout_s * 1000));
    while (!halted() && !round.all_answered() && std::chrono::steady_clock::now() < deadline) {
      round_wakeup.expires_at(deadline);
      co_await round_wakeup.async_wait(kNoThrow);
    }
    active_round = nullptr;
    if (stopping) {
      spdlog::info("run {} round {}: abandoned by shutdown; it will be run again after a restart",
                   run.id, round_no);
      co_return;
    }
    if (stop_requested) {
      spdlog::info("run {} round {}: abandoned, the run was stopped", run.id, round_no);
      co_return;
    }
    round_requested = false;
    const auto closed = round.close();

    store::RoundRecord record;
    record.run_id = run.id;
    record.round = round_no;
    record.started_ms = started;
    record.finished_ms = now_ms();
    record.selected = static_cast<std::int64_t>(candidates.size());
    record.accepted = static_cast<std::int64_t>(closed.accepted);
    record.rejected = static_cast<std::int64_t>(closed.rejected);
    record.timed_out = static_cast<std::int64_t>(closed.timed_out);
    record.dropped = static_cast<std::int64_t>(closed.dropped);
    std::vector<store::ClientResult> results;
    double weight = 0, loss = 0, accuracy = 0, eval_weight = 0, eval_loss = 0, eval_accuracy = 0;
    for (const auto& o : round.outcomes()) {
      store::ClientResult r;
      r.client_id = o.client_id;
      r.status = to_store(o.status);
      r.reason = o.reason;
      r.samples = static_cast<std::int64_t>(o.samples);
      r.loss = o.loss;
      r.accuracy = o.accuracy;
      r.duration_s = o.train_seconds;
      r.bytes_up = static_cast<std::int64_t>(o.bytes_up);
      r.bytes_down = static_cast<std::int64_t>(o.bytes_down);
      record.bytes_up += r.bytes_up;
      record.bytes_down += r.bytes_down;
      if (o.status == ClientStatus::ok) {
        weight += double(o.samples);
        loss += double(o.samples) * o.loss;
        accuracy += double(o.samples) * o.accuracy;
      }
      if (o.evaluation && o.status == ClientStatus::ok) {
        r.eval_loss = o.evaluation->loss;
        r.eval_accuracy = o.evaluation->accuracy;
        r.eval_samples = static_cast<std::int64_t>(o.evaluation->samples);
        eval_weight += double(o.evaluation->samples);
        eval_loss += double(o.evaluation->samples) * o.evaluation->loss;
        eval_accuracy += double(o.evaluation->samples) * o.evaluation->accuracy;
      }
      results.push_back(std::move(r));
    }
    if (weight > 0) {
      record.train_loss = loss / weight;
      record.train_accuracy = accuracy / weight;
    }
    if (eval_weight > 0) {
      record.fed_eval_loss = eval_loss / eval_weight;
      record.fed_eval_accuracy = eval_accuracy / eval_weight;
    }

    if (!closed.succeeded) {
      record.failure_reason = closed.failure_reason;
      if (auto saved = store.record_failed_round(record, results); !saved) {
        spdlog::error("run {} round {}: could not record the failure: {}", run.id, round_no,
                      saved.error().message);
      }
      spdlog::warn("run {} round {} failed: {}", run.id, round_no, closed.failure_reason);
      event("round_failed", run.id, round_no, "", {{"reason", closed.failure_reason}});
      if (hooks.round_failed) {
        hooks.round_failed(run.id, record);
      }
      if (config.on_failed_round == FailedRoundPolicy::retry && attempt < config.max_retries) {
        ++attempt;
        continue;
      }
      end_run(store::RunState::paused,
              "round " + std::to_string(round_no) + " failed: " + closed.failure_reason);
      co_return;
    }

    // The Round viewed the old global; it is not used past this point.
    global = std::make_shared<const std::vector<float>>((*strategy)->finish_round());
    if (server_test) {
      std::copy(global->begin(), global->end(), eval_model->params().begin());
      const auto eval = model::evaluate(*eval_model, model::loss_for(spec), *server_test);
      record.eval_loss = eval.loss;
      record.eval_accuracy = eval.accuracy;
    }
    // The checkpoint file is complete and durable before the row that names it commits.
    const auto path = (run_dir / ("round-" + std::to_string(round_no) + ".fcp")).string();
    const auto bytes = model::encode_params(
        layout, *global,
        nlohmann::json{
            {"run", run.id}, {"round", round_no}, {"spec", nlohmann::json::parse(spec_json)}}
            .dump());
    if (auto written = model::write_file_atomically(path, bytes); !written) {
      end_run(store::RunState::paused, "cannot write checkpoint: " + written.error().message);
      co_return;
    }
    store::CheckpointRef ref{path, static_cast<std::int64_t>(bytes.size()), crc32(bytes),
                             layout.fingerprint_hex()};
    auto committed = store.commit_round(record, results, ref);
    if (!committed) {
      end_run(store::RunState::paused,
              "cannot commit round " + std::to_string(round_no) + ": " + committed.error().message);
      co_return;
    }
    attempt = 0;
    spdlog::info(
        "run {} round {} committed: {} of {} updates accepted, train loss {:.4f}{}", run.id,
        round_no, closed.accepted, candidates.size(), record.train_loss,
        record.eval_accuracy ? ", server accuracy " + std::to_string(*record.eval_accuracy) : "");
    event("round_committed", run.id, round_no, "",
          {{"accepted", closed.accepted},
           {"rejected", closed.rejected},
           {"timed_out", closed.timed_out}});
    if (hooks.round_committed) {
      hooks.round_committed(run.id, *committed);
    }
  }
}

result<std::int64_t> FederationServer::start_run(const RunConfig& config) {
  auto& s = *impl_;
  if (s.run_active) {
    return fail(errc::failed_precondition,
                "run " + std::to_string(s.active_run_id) + " is still active");
  }
  auto run = s.store.create_run(config.name, to_json_text(config), config.rounds, now_ms());
  if (!run) {
    return run.error();
  }
  if (auto state = s.store.set_run_state(run->id, store::RunState::running, "", now_ms()); !state) {
    return state.error();
  }
  spdlog::info("run {} '{}' started: {} rounds of {}", run->id, config.name, config.rounds,
               config.strategy);
  s.event("run_started", run->id, std::nullopt, "", nlohmann::json::parse(to_json_text(config)));
  s.run_active = true;
  asio::co_spawn(s.io, s.run_loop(*run, config), asio::detached);
  return run->id;
}

result<void> FederationServer::resume_runs() {
  auto& s = *impl_;
  auto runs = s.store.list_runs(1000, 0);
  if (!runs) {
    return runs.error();
  }
  bool resumed = false;
  for (const auto& run : *runs) {
    if (run.state != store::RunState::running) {
      continue;
    }
    auto config = parse_run_config(run.config_json);
    if (!config) {
      s.store.set_run_state(run.id, store::RunState::failed,
                            "stored config unreadable: " + config.error().message, now_ms());
      continue;
    }
    if (resumed || s.run_active) {
      s.store.set_run_state(run.id, store::RunState::paused, "another run was resumed first",
                            now_ms());
      continue;
    }
    resumed = true;
    s.run_active = true;
    spdlog::info("run {} resumes after round {}", run.id, run.last_round);
    asio::co_spawn(s.io, s.run_loop(run, *config), asio::detached);
  }
  return {};
}

void FederationServer::shutdown() {
  auto& s = *impl_;
  if (s.stopping) {
    return;
  }
  s.stopping = true;
  error_code ignored;
  s.acceptor.close(ignored);
  s.round_wakeup.cancel();
  s.client_wakeup.cancel();
  s.admin_wakeup.cancel();
  s.options.channel.payload_gate->close();
  for (auto& [id, session] : s.sessions) {
    session->link->close();
  }
  spdlog::info("federation server stopping");
}

void FederationServer::attach_local_session(std::string client_id, net::LocalStream stream) {
  auto& s = *impl_;
  if (s.stopping || s.connections >= s.options.max_connections) {
    spdlog::warn("refusing in-process client '{}': {}", client_id,
                 s.stopping ? "shutting down" : "connection limit reached");
    return;  // the stream closes as it goes out of scope; the client sees end of stream
  }
  asio::co_spawn(s.io, s.serve_local(std::move(client_id), std::move(stream)),
                 log_session_exception);
}

result<void> FederationServer::stop_run(std::int64_t run_id) {
  auto& s = *impl_;
  auto run = s.store.get_run(run_id);
  if (!run) {
    return run.error();
  }
  const bool active = s.run_active && s.active_run_id == run_id;
  if (active && s.stop_requested) {
    return fail(errc::failed_precondition,
                "run " + std::to_string(run_id) + " is already stopping");
  }
  if (!active &&
      (run->state == store::RunState::finished || run->state == store::RunState::failed ||
       run->state == store::RunState::stopped)) {
    return fail(errc::failed_precondition, "run " + std::to_string(run_id) +
                                               " has already ended (" +
                                               std::string(store::to_string(run->state)) + ")");
  }
  // Recorded at once, so that whoever asked sees the new state; the loop of an active run
  // leaves when it next wakes, abandoning the round in flight (nothing of it is committed).
  const std::string why = "stopped by an admin";
  if (auto saved = s.store.set_run_state(run_id, store::RunState::stopped, why, now_ms()); !saved) {
    return saved.error();
  }
  if (active) {
    s.stop_requested = true;
    s.round_wakeup.cancel();
    s.client_wakeup.cancel();
    s.admin_wakeup.cancel();
  }
  spdlog::info("run {} stopped by an admin", run_id);
  s.event("run_ended", run_id, std::nullopt, "", {{"state", "stopped"}, {"reason", why}});
  if (s.hooks.run_ended) {
    s.hooks.run_ended(run_id, store::RunState::stopped);
  }
  return {};
}

result<std::int64_t> FederationServer::advance_round(std::int64_t run_id) {
  auto& s = *impl_;
  auto run = s.store.get_run(run_id);
  if (!run) {
    return run.error();
  }
  const auto name = "run " + std::to_string(run_id);
  if (!s.run_active || s.active_run_id != run_id || s.stop_requested) {
    return fail(errc::failed_precondition,
                name + " is not running (" + std::string(store::to_string(run->state)) + ")");
  }
  if (!s.active_manual) {
    return fail(errc::failed_precondition,
                name +
                    " advances by itself; only runs created with \"manual\": true take "
                    "round requests");
  }
  if (s.active_round != nullptr) {
    return fail(errc::failed_precondition, "round " +
                                               std::to_string(s.active_round->settings().round) +
                                               " of " + name + " is still in progress");
  }
  if (s.round_requested) {
    return fail(errc::failed_precondition, "the next round of " + name + " was already requested");
  }
  s.round_requested = true;
  s.admin_wakeup.cancel();
  return run->last_round + 1;
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
  out.run_active = s.run_active;
  out.active_run_id = s.run_active ? s.active_run_id : 0;
  out.active_round = s.active_round != nullptr ? s.active_round->settings().round : 0;
  out.waiting_for_admin = s.waiting_for_admin;
  out.online_clients = s.sessions.size();
  out.connections = s.connections;
  return out;
}

std::vector<SessionInfo> FederationServer::sessions() const {
  const auto& s = *impl_;
  std::vector<SessionInfo> out;
  out.reserve(s.sessions.size());
  for (const auto& [id, session] : s.sessions) {
    SessionInfo info;
    info.client_id = id;
    info.peer = session->peer;
    info.connected_ms = session->connected_ms;
    info.training = s.active_round != nullptr && s.active_round->is_selected(id) &&
                    !s.active_round->has_answered(id);
    out.push_back(std::move(info));
  }
  return out;
}

TrafficCounters FederationServer::traffic() const {
  const auto& s = *impl_;
  TrafficCounters out = s.ended_sessions_traffic;
  for (const auto& [id, session] : s.sessions) {
    out.bytes_in += session->link->bytes_read();
    out.bytes_out += session->link->bytes_written();
  }
  return out;
}

std::size_t FederationServer::online_clients() const noexcept {
  return impl_->sessions.size();
}
bool FederationServer::run_active() const noexcept {
  return impl_->run_active;
}

}  // namespace fedcore::server
