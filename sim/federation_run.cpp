// Longer than our ~500-line guideline, on purpose: it is the one place that wires a whole
// simulated federation (server thread, PKI, dashboard, N daemons, evaluator, report) in
// the order it starts and stops; its parts are already their own files (sim_data, pki,
// site_behaviour, progress, report), and what is left is that order.
#include "sim/federation_run.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "client/daemon.hpp"
#include "server/api/api_server.hpp"
#include "server/api/auth.hpp"
#include "server/federation/federation_server.hpp"
#include "server/store/history_store.hpp"
#include "shared/model/federated_vector.hpp"
#include "shared/model/param_io.hpp"
#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"
#include "shared/net/memory_link.hpp"
#include "shared/util/threads.hpp"
#include "sim/attack.hpp"
#include "sim/cluster.hpp"
#include "sim/pki.hpp"

namespace fedcore::sim {
namespace asio = boost::asio;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kMaxClientThreads = 16;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// What the server's hooks report, handed from its thread to the calling thread.
struct Inbox {
  struct Item {
    enum Kind { committed, failed, ended } kind = committed;
    store::RoundRecord round;
    store::RunState state = store::RunState::running;
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Item> items;
  std::size_t online = 0;

  void push(Item item) {
    {
      std::lock_guard lock(mutex);
      items.push_back(std::move(item));
    }
    changed.notify_all();
  }
  void set_online(bool up) {
    {
      std::lock_guard lock(mutex);
      online = up ? online + 1 : online - 1;
    }
    changed.notify_all();
  }
};

// The run configuration the server gets, as an admin would submit it.
result<federation::RunConfig> make_run_config(const SimOptions& o) {
  auto spec = model_spec_json(o);
  if (!spec) {
    return spec.error();
  }
  nlohmann::json j{{"name", "fedcore-sim"},
                   {"model", std::move(*spec)},
                   {"strategy", o.strategy},
                   {"strategy_options", nlohmann::json::parse(o.strategy_options)},
                   {"client_sampling", o.client_sampling},
                   {"batch_norm", o.batch_norm},
                   {"rounds", o.rounds},
                   {"min_clients", 1},
                   // Every round waits for all the sites (dropped ones reconnect), so the
                   // seeded sample is drawn from the same set whatever the timing.
                   {"min_available_clients", o.clients},
                   {"local_epochs", o.local_epochs},
                   {"batch_size", o.batch},
                   {"optimizer", optimizer_json(o)},
                   {"proximal_mu", o.mu},
                   {"round_timeout_s", o.round_timeout_s},
                   {"seed", o.seed},
                   {"federated_evaluation", true},
                   {"wait_for_clients_s", 120},
                   {"on_failed_round", "retry"},
                   {"max_retries", 2}};
  if (o.compression != "none") {
    j["compression"] = {{"up", o.compression}};
    if (o.compression == "topk") {
      j["compression"]["topk_fraction"] = o.topk_fraction;
    }
    if (o.compression_down != "none") {
      j["compression"]["down"] = o.compression_down;
    }
  }
  if (o.clients_per_round > 0) {
    j["clients_per_round"] = o.clients_per_round;
  } else {
    j["fraction"] = o.fraction;
  }
  // The simulator evaluates every round's checkpoint on the test split itself; per-client
  // evaluation is not covered by a DP budget (and under secure aggregation would only add
  // three summed coordinates), so privacy runs leave it off.
  nlohmann::json privacy = nlohmann::json::object();
  if (o.secure_aggregation) {
    privacy["secure_aggregation"] = {{"bind_keys", o.transport == Transport::tls},
                                     {"stage_timeout_s", o.round_timeout_s}};
    j["min_clients"] = 3;
  }
  if (o.min_clients != 0) {
    j["min_clients"] = o.min_clients;
  }
  if (o.dp != "none") {
    privacy["dp"] = {{"mode", o.dp},
                     {"epsilon", o.epsilon},
                     {"delta", o.delta},
                     {"clip_norm", o.clip_norm},
                     {"noise_multiplier", o.noise_multiplier}};
    if (o.adaptive_clip_quantile > 0) {
      const double per_round = o.clients_per_round > 0
                                   ? double(o.clients_per_round)
                                   : std::max(1.0, o.fraction * double(o.clients));
      privacy["dp"]["adaptive_clip"] = {
          {"target_quantile", o.adaptive_clip_quantile},
          {"learning_rate", 0.2},
          {"count_stddev", o.clip_count_stddev > 0 ? o.clip_count_stddev : per_round / 20}};
    }
  }
  if (!privacy.empty()) {
    j["privacy"] = privacy;
    j["federated_evaluation"] = false;
  }
  auto config = federation::run_config_from_json(j);
  if (config) {
    // Breast-cancer arrives standardised with its whole training split's statistics
    // (sim_data.hpp), which is what the federated estimate computes from the sites' parts
    // of that split (docs/sim.md): the sites must not scale it again. Images are never
    // scaled (feature_scaling.hpp).
    config->feature_scaling = protocol::ScalingMode::none;
  }
  return config;
}

// Evaluates each committed round's checkpoint on the test split.
class Evaluator {
 public:
  static result<Evaluator> create(const SimOptions& o, const data::TrainTest& data,
                                  const std::string& history_path) {
    auto document = model_spec_json(o);
    if (!document) {
      return document.error();
    }
    auto spec = model::parse_model_spec(*document);
    if (spec) {
      spec = model::complete_spec(*spec, data.train.sample_shape, data.train.num_classes);
    }
    if (!spec) {
      return spec.error();
    }
    auto built = model::build_model(*spec);
    if (!built) {
      return built.error();
    }
    return Evaluator(std::move(*built), model::loss_for(*spec), data.test, history_path);
  }

  result<model::EvalReport> evaluate(std::int64_t run_id, std::int64_t round) {
    if (!store_) {
      auto opened = store::HistoryStore::open_read_only(history_path_);
      if (!opened) {
        return opened.error();
      }
      store_.emplace(std::move(*opened));
    }
    auto checkpoints = store_->list_checkpoints(run_id);
    if (!checkpoints) {
      return checkpoints.error();
    }
    for (const auto& c : *checkpoints) {
      if (c.round != round) {
        continue;
      }
      auto bundle = model::load_params(c.ref.path);
      if (!bundle) {
        return bundle.error();
      }
      if (bundle->params.size() != model::federated_size(model_)) {
        return fail(errc::failed_precondition,
                    "checkpoint " + c.ref.path + " does not fit the run's model");
      }
      model::load_federated(model_, bundle->params);
      return model::evaluate(model_, loss_, test_);
    }
    return fail(errc::not_found, "no checkpoint for round " + std::to_string(round));
  }

 private:
  Evaluator(model::Model m, model::LossKind loss, const data::Dataset& test, std::string path)
      : model_(std::move(m)), loss_(loss), test_(test), history_path_(std::move(path)) {}
  model::Model model_;
  model::LossKind loss_;
  const data::Dataset& test_;
  std::string history_path_;
  std::optional<store::HistoryStore> store_;
};

// The client side: daemons spread over a few io_context threads, training on one compute
// pool of a thread per core (a simulated site has no thread of its own: 10,000 sites are
// 10,000 sessions and daemons, not 10,000 threads).
class ClientFleet {
 public:
  explicit ClientFleet(std::size_t clients)
      : ios_(std::min(clients, kMaxClientThreads)),
        compute_(std::make_shared<asio::thread_pool>(
            std::max<std::size_t>(1, std::thread::hardware_concurrency()))) {
    for (auto& io : ios_) {
      io = std::make_unique<asio::io_context>(1);
      guards_.emplace_back(asio::make_work_guard(*io));
    }
  }
  ~ClientFleet() { stop(); }

  asio::io_context& io_for(std::size_t index) { return *ios_[index % ios_.size()]; }
  const std::shared_ptr<asio::thread_pool>& compute() const { return compute_; }

  void add(std::unique_ptr<client::ClientDaemon> daemon, asio::io_context& io) {
    asio::co_spawn(io, daemon->run(), asio::detached);
    daemons_.push_back({std::move(daemon), &io});
  }

  void start() {
    for (auto& io : ios_) {
      threads_.emplace_back([io = io.get()] { io->run(); });
    }
  }

  // Stops every daemon and waits until their io_contexts ran dry (heartbeat timers end
  // within one heartbeat interval; a training in flight keeps its io_context busy until
  // it is done), then until the compute pool is idle, before the daemons go.
  void stop() {
    for (auto& d : daemons_) {
      asio::post(*d.io, [daemon = d.daemon.get()] { daemon->stop(); });
    }
    guards_.clear();
    for (auto& t : threads_) {
      t.join();
    }
    threads_.clear();
    compute_->join();
    daemons_.clear();
  }

 private:
  struct Entry {
    std::unique_ptr<client::ClientDaemon> daemon;
    asio::io_context* io;
  };
  std::vector<std::unique_ptr<asio::io_context>> ios_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards_;
  std::vector<Entry> daemons_;
  std::vector<std::thread> threads_;
  std::shared_ptr<asio::thread_pool> compute_;
};

// The server on its own thread, and the dashboard on the same io_context.
class ServerThread {
 public:
  ServerThread() : guard_(asio::make_work_guard(io_)) {}
  ~ServerThread() { stop(); }
  asio::io_context& io() { return io_; }
  // The admin API and dashboard, when the run has one. Owned here so that it is destroyed
  // after the thread joined and before the io_context its timers belong to.
  std::unique_ptr<api::ApiServer>& dashboard() { return dashboard_; }

  void start(std::unique_ptr<federation::FederationServer> s) {
    server_ = std::move(s);
    thread_ = std::thread([this] { io_.run(); });
  }
  federation::FederationServer& server() { return *server_; }

  template <class F>
  auto call(F f) {
    std::promise<decltype(f())> done;
    asio::post(io_, [&] { done.set_value(f()); });
    return done.get_future().get();
  }

  void stop() {
    if (!server_) {
      return;
    }
    asio::post(io_, [this] { server_->shutdown(); });
    guard_.reset();
    thread_.join();
    dashboard_.reset();
    server_.reset();
  }

 private:
  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::unique_ptr<federation::FederationServer> server_;
  std::unique_ptr<api::ApiServer> dashboard_;
  std::thread thread_;
};

// Shuts the dashboard down on the server's thread, once: explicitly before the server
// thread stops, or when leaving run_federation early (the thread still runs then).
class DashboardStop {
 public:
  explicit DashboardStop(ServerThread& thread) : thread_(thread), dashboard_(thread.dashboard()) {}
  ~DashboardStop() { now(); }
  DashboardStop(const DashboardStop&) = delete;
  DashboardStop& operator=(const DashboardStop&) = delete;
  void now() {
    if (dashboard_ && !done_) {
      done_ = true;
      thread_.call([this] {
        dashboard_->shutdown();
        return 0;
      });
    }
  }

 private:
  ServerThread& thread_;
  std::unique_ptr<api::ApiServer>& dashboard_;
  bool done_ = false;
};

// The admin API and dashboard (api/api_server.hpp) on the server's io_context, with the
// federation's certificate and a token made for this run. Returns the line to print:
// the URL and the token, which exists nowhere else.
result<std::string> start_dashboard(const SimOptions& o, const SimPki& pki,
                                    const std::string& federation_listener,
                                    ServerThread& server_thread, store::HistoryStore& store) {
  auto token = api::generate_token();
  if (!token) {
    return token.error();
  }
  api::ApiServerOptions a;
  a.port = static_cast<std::uint16_t>(o.dashboard_port);
  a.web_root = o.web_root;
  a.cert_file = pki.server_config().cert_file;
  a.key_file = pki.server_config().key_file;
  a.tokens = {{"fedcore-sim", api::sha256_hex(*token),
               std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count(),
               api::Role::admin, std::nullopt}};
  a.federation_listener = federation_listener;
  auto bound = server_thread.call([&]() -> result<std::uint16_t> {
    auto created = api::ApiServer::create(server_thread.io(), a, server_thread.server(), store);
    if (!created) {
      return created.error();
    }
    server_thread.dashboard() = std::move(*created);
    return server_thread.dashboard()->listen();
  });
  if (!bound) {
    return fail(bound.error().code, "dashboard: " + bound.error().message);
  }
  return "dashboard: https://localhost:" + std::to_string(*bound) + "/  (token " + *token +
         "; the certificate is signed by " + pki.server_config().ca_file + ")";
}

// A memory link (shared/net/memory_link.hpp): one end for the site (on its io_context),
// the other attached to the server as that site's session (on the server's thread). No file
// descriptor per site, so the open-file limit does not bound the number of sites.
std::unique_ptr<net::Link> connect_in_process(ServerThread& server, asio::io_context& site_io,
                                              const std::string& id) {
  auto link = net::make_memory_link(site_io.get_executor(), server.io().get_executor());
  asio::post(server.io(), [&server, id, end = std::move(link.second)]() mutable {
    server.server().attach_local_session(id, std::move(end));
  });
  return std::move(link.first);
}

// Every site's id, in site order (the same on every rank).
std::vector<std::string> site_ids(std::size_t clients) {
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < clients; ++i) {
    ids.push_back(client_id(i, clients));
  }
  return ids;
}

// How long ranks other than 0 wait for rank 0's server: its throwaway PKI makes a
// certificate per site first.
std::chrono::milliseconds setup_wait(std::size_t clients) {
  return std::chrono::seconds(120) + std::chrono::milliseconds(100) * clients;
}
// How long a rank's sites serve a run before the rank gives up on it.
constexpr std::chrono::hours kLongestRun{24};

// Where the sites find the server: over TLS at host:port, or (port 0) in-process.
struct ServerEndpoint {
  std::string host;
  std::uint16_t port = 0;
  ServerThread* in_process = nullptr;
};

// Adds the sites `range` of the simulation to `fleet`.
result<void> add_sites(ClientFleet& fleet, const SimOptions& o, const SimData& data,
                       SiteRange range, const std::vector<std::string>& ids, const SimPki& pki,
                       const ServerEndpoint& server, SiteBehaviour& behaviour) {
  // Pure in the options: every rank of an MPI run draws the same attackers.
  const auto attack =
      plan_attack(*attack_kind(o.attack), o.attack_scale, o.attack_fraction, o.clients, o.seed);
  // "A little is enough": the attackers meet here (one process, every site in every round:
  // sim/options.cpp refuses the rest). They wait for each other at most half a round.
  std::shared_ptr<Collusion> collusion;
  if (attack.kind == AttackKind::little_is_enough && attack.attackers() > 0) {
    const double z =
        o.attack_scale > 0 ? o.attack_scale : little_is_enough_z(o.clients, attack.attackers());
    collusion = std::make_shared<Collusion>(attack.attackers(), z);
  }
  const auto collusion_wait =
      std::chrono::milliseconds(static_cast<std::int64_t>(o.round_timeout_s * 1000.0 / 2.0));
  for (std::size_t i = range.begin; i < range.end; ++i) {
    auto& io = fleet.io_for(i - range.begin);
    client::ClientOptions c;
    if (server.in_process == nullptr) {
      c.host = server.host;
      c.port = server.port;
      c.tls = pki.client_config(ids[i]);
    } else {
      c.connect_local = [&thread = *server.in_process, &io,
                         id = ids[i]]() -> result<std::unique_ptr<net::Link>> {
        return connect_in_process(thread, io, id);
      };
    }
    c.threads = o.threads;
    c.compute = fleet.compute();
    // Thousands of sites in one process: none holds its last TRAIN between rounds.
    c.keep_receive_buffer = false;
    // A simulated site that drops (an injected fault) is back within tens of milliseconds,
    // as before rounds of a fast simulation move on: every WELCOMEd session counts as
    // healthy, so the backoff starts over after each drop (the daemon's own tests cover
    // its growth across failures).
    c.initial_backoff = std::chrono::milliseconds(20);
    c.max_backoff = std::chrono::milliseconds(500);
    c.healthy_session = std::chrono::milliseconds(0);
    c.seed = o.seed + i;
    c.before_update = behaviour.seam(i);
    c.after_training = attack_seam(attack, i, collusion);
    if (collusion && attack.is_malicious(i)) {
      c.before_update = collusion_seam(collusion, collusion_wait, std::move(c.before_update));
    }
    const bool flip = attack.kind == AttackKind::label_flip && attack.is_malicious(i);
    auto daemon = client::ClientDaemon::create(io, std::move(c), site_data(data, i, flip));
    if (!daemon) {
      return fail(daemon.error().code, ids[i] + ": " + daemon.error().message);
    }
    fleet.add(std::move(*daemon), io);
  }
  return {};
}

// A rank other than 0: its share of the sites, against rank 0's server, until rank 0 says
// the run is over.
result<FederatedResult> run_remote_sites(const SimOptions& o, const SimData& data, Cluster& cluster,
                                         const std::function<void(const std::string&)>& note) {
  const auto range = sites_of(o.clients, cluster.rank(), cluster.size());
  auto port = cluster.share_from_rank0(0, setup_wait(o.clients));
  if (!port) {
    return port.error();
  }
  const auto ids = site_ids(o.clients);
  const auto pki = SimPki::existing((std::filesystem::path(o.out) / "certs").string());
  SiteBehaviour behaviour(o);
  ClientFleet fleet(range.count());
  const ServerEndpoint server{o.server_host, static_cast<std::uint16_t>(*port), nullptr};
  if (auto added = add_sites(fleet, o, data, range, ids, pki, server, behaviour); !added) {
    return added.error();
  }
  fleet.start();
  note("rank " + std::to_string(cluster.rank()) + ": sites " + ids[range.begin] + " to " +
       ids[range.end - 1] + " connecting to " + o.server_host + ":" + std::to_string(*port));
  auto ended = cluster.barrier(kLongestRun);
  fleet.stop();
  if (!ended) {
    return ended.error();
  }
  FederatedResult outcome;
  outcome.end_state = "sites of rank " + std::to_string(cluster.rank());
  outcome.faults = behaviour.counts();
  return outcome;
}

}  // namespace

result<FederatedResult> run_federation(const SimOptions& o, const SimData& data,
                                       const RunCallbacks& callbacks, Cluster& cluster) {
  const auto setup_started = Clock::now();
  std::function<void(const std::string&)> note = [&](const std::string& text) {
    if (callbacks.note) {
      callbacks.note(text);
    }
  };
  if (o.clients < static_cast<std::size_t>(cluster.size())) {
    return fail(errc::invalid_argument, std::to_string(o.clients) + " sites cannot be shared by " +
                                            std::to_string(cluster.size()) + " ranks");
  }
  if (cluster.size() > 1 && o.transport != Transport::tls) {
    return fail(errc::invalid_argument, "sites in several processes need --transport tls");
  }
  if (cluster.rank() != 0) {
    return run_remote_sites(o, data, cluster, note);
  }
  const auto mine = sites_of(o.clients, 0, cluster.size());
  auto config = make_run_config(o);
  if (!config) {
    return config.error();
  }
  const fs::path out(o.out);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    return fail(errc::io_error, "cannot create " + o.out + ": " + ec.message());
  }
  FederatedResult outcome;
  outcome.history_path = (out / "history.db").string();
  for (const char* stale : {"history.db", "history.db-wal", "history.db-shm", "checkpoints"}) {
    fs::remove_all(out / stale, ec);
  }
  const auto ids = site_ids(o.clients);

  // The server builds its TLS context even when only in-process clients attach, so the
  // inproc transport still gets a CA and a server certificate (but no client ones).
  const bool tls = o.transport == Transport::tls;
  note(tls ? "creating a throwaway CA and " + std::to_string(o.clients) + " client certificates"
           : "creating a throwaway CA and server certificate");
  auto pki = SimPki::create(default_pki_script(), (out / "certs").string(),
                            tls ? ids : std::vector<std::string>{});
  if (!pki) {
    return pki.error();
  }

  auto store = store::HistoryStore::open(outcome.history_path);
  if (!store) {
    return store.error();
  }
  Inbox inbox;
  federation::ServerHooks hooks;
  hooks.round_committed = [&](std::int64_t, const store::RoundRecord& r) {
    inbox.push({Inbox::Item::committed, r, {}});
  };
  hooks.round_failed = [&](std::int64_t, const store::RoundRecord& r) {
    inbox.push({Inbox::Item::failed, r, {}});
  };
  hooks.run_ended = [&](std::int64_t, store::RunState state) {
    inbox.push({Inbox::Item::ended, {}, state});
  };
  hooks.client_changed = [&](const std::string&, bool online) { inbox.set_online(online); };

  federation::ServerOptions server_options;
  server_options.tls = pki->server_config();
  server_options.listen_address = o.server_host;
  // Heartbeats and HELLOs of thousands of in-process sites queue behind one server thread.
  server_options.hello_timeout = std::chrono::seconds(60);
  server_options.checkpoint_dir = (out / "checkpoints").string();
  server_options.max_connections = o.clients + 64;
  // Short heartbeats let the daemons' io_contexts run dry quickly at shutdown.
  server_options.heartbeat_seconds = 2;
  ServerThread server_thread;
  auto server =
      federation::FederationServer::create(server_thread.io(), server_options, *store, hooks);
  if (!server) {
    return server.error();
  }
  std::uint16_t port = 0;
  if (tls) {
    auto bound = (*server)->listen();
    if (!bound) {
      return bound.error();
    }
    port = *bound;
  }
  server_thread.start(std::move(*server));
  // The PKI is complete and the server listens: the other ranks may connect their sites.
  if (auto shared = cluster.share_from_rank0(port, setup_wait(o.clients)); !shared) {
    return shared.error();
  }
  DashboardStop dashboard_stop{server_thread};
  if (o.dashboard_port != 0) {
    auto url = start_dashboard(o, *pki, tls ? "127.0.0.1:" + std::to_string(port) : "in-process",
                               server_thread, *store);
    if (!url) {
      return url.error();
    }
    note(*url);
  }

  SiteBehaviour behaviour(o);
  ClientFleet fleet(mine.count());
  const ServerEndpoint endpoint{o.server_host, port, tls ? nullptr : &server_thread};
  if (auto added = add_sites(fleet, o, data, mine, ids, *pki, endpoint, behaviour); !added) {
    return added.error();
  }
  fleet.start();
  note("connecting " + std::to_string(o.clients) + " clients");
  {
    std::unique_lock lock(inbox.mutex);
    const auto deadline = std::chrono::seconds(30) + std::chrono::milliseconds(50) * o.clients;
    if (!inbox.changed.wait_for(lock, deadline, [&] { return inbox.online >= o.clients; })) {
      return fail(errc::deadline_exceeded, "only " + std::to_string(inbox.online) + " of " +
                                               std::to_string(o.clients) + " clients came online");
    }
  }
  outcome.setup_s = seconds_since(setup_started);

  auto evaluator = Evaluator::create(o, data.all, outcome.history_path);
  if (!evaluator) {
    return evaluator.error();
  }
  set_compute_threads(1);
  const auto run_started = Clock::now();
  auto run_id = server_thread.call([&] { return server_thread.server().start_run(*config); });
  if (!run_id) {
    return run_id.error();
  }
  outcome.run_id = *run_id;

  bool ended = false;
  while (!ended) {
    Inbox::Item item;
    {
      std::unique_lock lock(inbox.mutex);
      inbox.changed.wait(lock, [&] { return !inbox.items.empty(); });
      item = std::move(inbox.items.front());
      inbox.items.pop_front();
    }
    switch (item.kind) {
      case Inbox::Item::failed:
        ++outcome.failed_rounds;
        break;
      case Inbox::Item::ended:
        ended = true;
        outcome.end_state = std::string(store::to_string(item.state));
        break;
      case Inbox::Item::committed: {
        const auto& r = item.round;
        RoundRow row;
        row.round = r.round;
        row.selected = r.selected;
        row.participants = r.accepted;
        row.rejected = r.rejected;
        row.dropped = r.dropped;
        row.timed_out = r.timed_out;
        row.bytes_up = r.bytes_up;
        row.bytes_down = r.bytes_down;
        row.duration_s = double(r.finished_ms - r.started_ms) / 1000.0;
        row.train_loss = r.train_loss;
        row.fed_eval_accuracy = r.fed_eval_accuracy;
        row.epsilon = r.epsilon;
        if (r.dp_charge && r.dp_charge->clip_norm) {
          row.clip_norm = r.dp_charge->clip_norm;
        }
        if (o.batch_norm == "local") {
          // FedBN has no global model to test centrally (its BatchNorm is each site's): the
          // accuracy is the federated evaluation's, every site with its own BatchNorm.
          row.accuracy = r.fed_eval_accuracy.value_or(0);
          row.loss = r.fed_eval_loss.value_or(0);
        } else {
          auto eval = evaluator->evaluate(r.run_id, r.round);
          if (!eval) {
            return fail(eval.error().code,
                        "round " + std::to_string(r.round) + ": " + eval.error().message);
          }
          row.accuracy = eval->accuracy;
          row.loss = eval->loss;
        }
        row.elapsed_s = seconds_since(run_started);
        outcome.rounds.push_back(row);
        if (callbacks.round_done) {
          callbacks.round_done(row);
        }
        break;
      }
    }
  }
  outcome.run_s = seconds_since(run_started);
  // The run is over: the other ranks may stop their sites.
  auto others_done = cluster.barrier(kLongestRun);
  fleet.stop();
  if (!others_done) {
    return others_done.error();
  }
  if (server_thread.dashboard() && o.dashboard_linger_s > 0) {
    // For people looking at the finished run in a browser; the process only waits.
    note("the dashboard stays up for " + std::to_string(o.dashboard_linger_s) +
         " s (Ctrl-C ends it sooner)");
    std::this_thread::sleep_for(std::chrono::seconds(o.dashboard_linger_s));
  }
  dashboard_stop.now();
  server_thread.stop();
  if (auto read = store::HistoryStore::open_read_only(outcome.history_path); read) {
    if (auto run = read->get_run(outcome.run_id); run) {
      outcome.end_reason = run->error;
    }
  }
  outcome.faults = behaviour.counts();
  return outcome;
}

}  // namespace fedcore::sim
