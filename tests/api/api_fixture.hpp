// A live admin API for tests: a PKI made by certs/fedcore-pki, a real SQLite history, a
// FederationServer and an ApiServer sharing one io_context on one thread (as in
// fedcore-server), a web root with a few files and two symlinks (one leaving the root),
// and, on request, real client daemons over mutual TLS. Everything is stopped and
// joined by the destructor; every wait is bounded.
#pragma once

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

#include "client/daemon.hpp"
#include "server/api/api_server.hpp"
#include "server/api/auth.hpp"
#include "shared/util/source_tree.hpp"
#include "tests/api/https_client.hpp"
#include "tests/temp_dir.hpp"
#include "tests/tls/tls_support.hpp"

namespace fedcore::api::testing {

// The token every fixture accepts (its SHA-256 is configured, never the token).
inline const std::string kToken =
    "3f1c9a7e5b2d4c6e8a0b1d3f5e7c9a1b3d5f7e9c1a3b5d7f9e1c3a5b7d9f1e3c";
inline const std::string kOtherToken =
    "0000000000000000000000000000000000000000000000000000000000000001";

struct FixtureOptions {
  std::vector<std::string> client_ids = {"hospital-a", "hospital-b"};
  // Applied to the ApiServer options (timeouts, caps) before it starts.
  std::function<void(ApiServerOptions&)> tune{};
  // Where the history (fedcore.db) and the checkpoints live; empty: the fixture's folder.
  std::string data_dir{};
  // Applied to the federation server's options before it is created.
  std::function<void(federation::ServerOptions&)> tune_federation{};
};

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

inline client::DataSource breast_cancer() {
  client::DataSource source;
  source.format = "csv";
  source.path = fedcore::source_path("data/breast_cancer_wisconsin.csv");
  source.label_column = "benign";
  return source;
}

class ApiFixture {
 public:
  explicit ApiFixture(FixtureOptions options = {}) : pki_(dir_.path("pki")) {
    for (const std::string args : {"init", "server fedcore-server"}) {
      auto made = pki_.run(args);
      EXPECT_EQ(made.status, 0) << made.output;
    }
    for (const auto& id : options.client_ids) {
      auto made = pki_.run("client " + id);
      EXPECT_EQ(made.status, 0) << made.output;
    }
    make_web_root();
    const std::filesystem::path data =
        options.data_dir.empty() ? dir_.root() : std::filesystem::path(options.data_dir);
    auto store = store::HistoryStore::open((data / "fedcore.db").string());
    EXPECT_TRUE(store) << store.error().to_string();
    store_.emplace(std::move(*store));

    federation::ServerOptions fed;
    fed.tls = pki_.server_config();
    fed.checkpoint_dir = (data / "checkpoints").string();
    fed.heartbeat_seconds = 1;
    if (options.tune_federation) {
      options.tune_federation(fed);
    }
    federation::ServerHooks hooks;
    hooks.round_committed = [this](std::int64_t, const store::RoundRecord&) {
      notify([&] { ++rounds_committed_; });
    };
    hooks.run_ended = [this](std::int64_t, store::RunState state) {
      notify([&] { ended_ = state; });
    };
    hooks.client_changed = [this](const std::string&, bool online) {
      notify([&] { online_ += online ? 1 : -1; });
    };
    auto federation = federation::FederationServer::create(io_, fed, *store_, hooks);
    EXPECT_TRUE(federation) << federation.error().to_string();
    federation_ = std::move(*federation);
    auto fed_port = federation_->listen();
    EXPECT_TRUE(fed_port) << fed_port.error().to_string();
    federation_port_ = *fed_port;

    ApiServerOptions api;
    api.port = 0;
    api.web_root = web_root().string();
    api.cert_file = pki_.server_cert();
    api.key_file = pki_.server_key();
    // Config tokens: both admins that never expire.
    api.tokens = {TokenEntry{"tester", sha256_hex(kToken), 1, Role::admin, std::nullopt},
                  TokenEntry{"other", sha256_hex(kOtherToken), 2, Role::admin, std::nullopt}};
    api.federation_listener = "127.0.0.1:" + std::to_string(federation_port_);
    if (options.tune) {
      options.tune(api);
    }
    auto created = ApiServer::create(io_, api, *federation_, *store_);
    EXPECT_TRUE(created) << created.error().to_string();
    api_ = std::move(*created);
    auto port = api_->listen();
    EXPECT_TRUE(port) << port.error().to_string();
    api_port_ = *port;
    work_.emplace(boost::asio::make_work_guard(io_));
    thread_ = std::thread([this] { io_.run(); });
  }

  ~ApiFixture() { stop(); }

  HttpsClient client(const std::string& token = kToken) const {
    return HttpsClient(api_port_, pki_.ca(), token);
  }

  // Runs `f` on the server thread and returns its result.
  template <class F>
  auto on_server(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    boost::asio::post(io_, [&task] { task(); });
    return result.get();
  }

  void start_client(const std::string& id, client::DataSource data = breast_cancer()) {
    client::ClientOptions options;
    options.port = federation_port_;
    options.tls = pki_.client_config(id);
    options.data = std::move(data);
    options.initial_backoff = std::chrono::milliseconds(100);
    options.max_backoff = std::chrono::milliseconds(500);
    auto c = std::make_unique<Client>();
    auto daemon = client::ClientDaemon::create(c->io, options);
    ASSERT_TRUE(daemon) << daemon.error().to_string();
    c->daemon = std::move(*daemon);
    boost::asio::co_spawn(c->io, c->daemon->run(), boost::asio::detached);
    c->thread = std::thread([io = &c->io] { io->run(); });
    clients_.push_back(std::move(c));
  }

  template <class Predicate>
  bool wait_until(Predicate done, std::chrono::seconds timeout = std::chrono::seconds(120)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return done(); });
  }
  // Checks `done()` every 20 ms, without holding the fixture's lock, until it holds or
  // the timeout passes (for conditions no hook announces).
  template <class Predicate>
  static bool poll_until(Predicate done, std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (std::chrono::steady_clock::now() > until) {
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  // How often `what` occurs in `text`.
  static std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
      ++n;
    }
    return n;
  }
  std::size_t api_connections() {
    return on_server([this] { return api_->connections(); });
  }
  int rounds_committed() const { return rounds_committed_; }
  int online() const { return online_; }
  std::optional<store::RunState> ended() const { return ended_; }

  void stop() {
    for (auto& c : clients_) {
      boost::asio::post(c->io, [d = c->daemon.get()] { d->stop(); });
    }
    for (auto& c : clients_) {
      c->thread.join();
    }
    clients_.clear();
    if (!thread_.joinable()) {
      return;
    }
    boost::asio::post(io_, [this] {
      api_->shutdown();
      federation_->shutdown();
    });
    work_.reset();
    auto drained = std::async(std::launch::async, [this] { thread_.join(); });
    if (drained.wait_for(std::chrono::seconds(15)) != std::future_status::ready) {
      ADD_FAILURE() << "the servers did not wind down within 15 s";
      io_.stop();
      drained.wait();
    }
  }

  const fedcore::testing::TempDir& dir() const { return dir_; }
  const tls::testing::Pki& pki() const { return pki_; }
  std::filesystem::path web_root() const { return dir_.root() / "web"; }
  std::uint16_t api_port() const { return api_port_; }
  std::uint16_t federation_port() const { return federation_port_; }
  ApiServer& api() { return *api_; }
  federation::FederationServer& federation() { return *federation_; }

 private:
  struct Client {
    boost::asio::io_context io;
    std::unique_ptr<client::ClientDaemon> daemon;
    std::thread thread;
  };

  void make_web_root() {
    const auto web = web_root();
    write_text(web / "index.html",
               "<!doctype html><title>Fedcore</title><script type=\"module\" "
               "src=\"/app.js\"></script>");
    write_text(web / "app.js", "export const answer = 42;\n");
    write_text(web / "style.css", "body { margin: 0; }\n");
    write_text(web / "icons" / "logo.svg", "<svg xmlns=\"http://www.w3.org/2000/svg\"/>");
    write_text(web / "node_modules" / "chart.js" / "dist" / "chart.umd.js", "/* chart */\n");
    write_text(web / ".hidden", "not for the web\n");
    write_text(dir_.root() / "secret.txt", "outside the web root\n");
    std::filesystem::create_symlink(dir_.root() / "secret.txt", web / "escape.txt");
    std::filesystem::create_symlink(web / "app.js", web / "alias.js");
  }

  template <class F>
  void notify(F change) {
    {
      std::lock_guard lock(mutex_);
      change();
    }
    changed_.notify_all();
  }

  fedcore::testing::TempDir dir_;
  tls::testing::Pki pki_;
  std::optional<store::HistoryStore> store_;
  boost::asio::io_context io_;
  std::unique_ptr<federation::FederationServer> federation_;
  std::unique_ptr<ApiServer> api_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread thread_;
  std::uint16_t federation_port_ = 0;
  std::uint16_t api_port_ = 0;
  std::vector<std::unique_ptr<Client>> clients_;
  std::mutex mutex_;
  std::condition_variable changed_;
  // Atomic: written under mutex_ (so waiters miss no change) and read by tests without it.
  std::atomic<int> rounds_committed_{0};
  std::atomic<int> online_{0};
  std::atomic<std::optional<store::RunState>> ended_;
};

}  // namespace fedcore::api::testing
