// A real federation on loopback for tests: a PKI made by certs/fedcore-pki, a
// FederationServer on its own thread with a real SQLite file, and client daemons each on
// their own thread, all talking mutual TLS over 127.0.0.1. Everything started is stopped
// and joined by the destructor; every wait is bounded.
#pragma once

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

#include "client/daemon.hpp"
#include "server/federation/federation_server.hpp"
#include "shared/data/dataset.hpp"
#include "tests/temp_dir.hpp"
#include "tests/tls/tls_support.hpp"

namespace fedcore::testing {

// Writes a Dataset as a CSV with its feature names and a label column.
inline void write_csv(const data::Dataset& d, const std::string& path,
                      const std::string& label = "label") {
  std::ofstream out(path);
  for (std::size_t f = 0; f < d.sample_size(); ++f) {
    out << (d.feature_names.size() == d.sample_size() ? d.feature_names[f]
                                                      : "f" + std::to_string(f))
        << ",";
  }
  out << label << "\n";
  out.precision(9);
  for (std::size_t i = 0; i < d.size(); ++i) {
    for (std::size_t f = 0; f < d.sample_size(); ++f) {
      out << d.features(static_cast<Eigen::Index>(f), static_cast<Eigen::Index>(i)) << ",";
    }
    out << d.labels[i] << "\n";
  }
}

class Federation {
 public:
  explicit Federation(const TempDir& dir) : dir_(dir), pki_(dir.path("pki")) {
    auto init = pki_.run("init");
    EXPECT_EQ(init.status, 0) << init.output;
    auto server = pki_.run("server fedcore-server");
    EXPECT_EQ(server.status, 0) << server.output;
  }

  ~Federation() { stop(); }

  const tls::testing::Pki& pki() const { return pki_; }

  void add_client_certificate(const std::string& id) {
    auto issued = pki_.run("client " + id);
    EXPECT_EQ(issued.status, 0) << issued.output;
  }

  // Opens the store and starts the server thread; returns the port.
  std::uint16_t start_server(federation::ServerOptions options = {}) {
    if (!store_) {
      auto store = store::HistoryStore::open(dir_.path("fedcore.db"));
      EXPECT_TRUE(store) << store.error().to_string();
      store_.emplace(std::move(*store));
    }
    options.tls = pki_.server_config();
    options.checkpoint_dir = dir_.path("checkpoints");
    federation::ServerHooks hooks;
    hooks.round_committed = [this](std::int64_t, const store::RoundRecord&) {
      notify([&] { ++rounds_committed_; });
    };
    hooks.round_failed = [this](std::int64_t, const store::RoundRecord&) {
      notify([&] { ++rounds_failed_; });
    };
    hooks.run_ended = [this](std::int64_t, store::RunState state) {
      notify([&] { ended_ = state; });
    };
    hooks.client_changed = [this](const std::string&, bool online) {
      notify([&] { online_ += online ? 1 : -1; });
    };
    server_io_ = std::make_unique<boost::asio::io_context>();
    if (manual_server_time_) {
      server_sleeper_ = std::make_unique<net::ManualSleeper>(*server_io_, server_clock_);
      options.sleeper = server_sleeper_.get();
    }
    auto server = federation::FederationServer::create(*server_io_, options, *store_, hooks);
    EXPECT_TRUE(server) << server.error().to_string();
    server_ = std::move(*server);
    auto port = server_->listen();
    EXPECT_TRUE(port) << port.error().to_string();
    port_ = *port;
    auto resumed = server_->resume_runs();
    EXPECT_TRUE(resumed);
    server_work_.emplace(boost::asio::make_work_guard(*server_io_));
    server_thread_ = std::thread([this] { server_io_->run(); });
    return port_;
  }

  void stop_server() {
    if (!server_) {
      return;
    }
    // Shut down, then let the io_context drain: coroutine frames reference the server and
    // the server's timers reference the io_context, so neither may go first.
    boost::asio::post(*server_io_, [this] { server_->shutdown(); });
    server_work_.reset();
    auto drained = std::async(std::launch::async, [this] { server_thread_.join(); });
    if (drained.wait_for(std::chrono::seconds(15)) != std::future_status::ready) {
      ADD_FAILURE() << "the server did not wind down within 15 s";
      server_io_->stop();
      drained.wait();
    }
    server_.reset();
    server_sleeper_.reset();
    server_io_.reset();
  }

  // Starts a client daemon on its own thread, with the site's policy and audit log if given.
  void start_client(const std::string& id, client::DataSource data, client::SitePolicy policy = {},
                    std::string audit_log = {}) {
    client::ClientOptions options;
    options.policy = std::move(policy);
    options.audit_log = std::move(audit_log);
    options.port = port_;
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

  result<std::int64_t> start_run(const std::string& config_json) {
    auto config = federation::parse_run_config(config_json);
    if (!config) {
      return config.error();
    }
    std::promise<result<std::int64_t>> started;
    boost::asio::post(*server_io_, [&] { started.set_value(server_->start_run(*config)); });
    return started.get_future().get();
  }

  // Before start_server: the server's heartbeat loops wait on a manual clock, moved by
  // advance_server_time (the channels' deadlines stay real).
  void use_manual_server_time() { manual_server_time_ = true; }
  void advance_server_time(std::chrono::milliseconds by) {
    std::promise<void> done;
    boost::asio::post(*server_io_, [&] {
      server_sleeper_->advance(by);
      done.set_value();
    });
    done.get_future().get();
  }

  // Runs `f(server)` on the server's thread and returns what it returns.
  template <class F>
  auto call(F f) {
    using R = decltype(f(*server_));
    std::promise<R> done;
    boost::asio::post(*server_io_, [&] { done.set_value(f(*server_)); });
    return done.get_future().get();
  }

  // Calls `f(server)` on the server's thread every 10 ms until it returns true or the
  // timeout passes; for state that no hook announces (e.g. a manual run waiting).
  template <class F>
  bool poll_server(F f, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (call(f)) {
        return true;
      }
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, std::chrono::milliseconds(10));
    }
    return false;
  }

  // Waits until `done()` holds (checked under the lock) or the timeout passes.
  template <class Predicate>
  bool wait_until(Predicate done, std::chrono::seconds timeout = std::chrono::seconds(120)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return done(); });
  }
  int rounds_committed() const { return rounds_committed_; }
  int rounds_failed() const { return rounds_failed_; }
  std::optional<store::RunState> ended() const { return ended_; }
  int online() const { return online_; }

  void stop_clients() {
    for (auto& c : clients_) {
      boost::asio::post(c->io, [d = c->daemon.get()] { d->stop(); });
    }
    for (auto& c : clients_) {
      c->thread.join();
    }
    clients_.clear();
  }

  void stop() {
    stop_clients();
    stop_server();
  }

  // A second connection to the store (the server's stays on its thread).
  store::HistoryStore open_store() {
    auto s = store::HistoryStore::open_read_only(dir_.path("fedcore.db"));
    EXPECT_TRUE(s) << s.error().to_string();
    return std::move(*s);
  }

 private:
  struct Client {
    boost::asio::io_context io;
    std::unique_ptr<client::ClientDaemon> daemon;
    std::thread thread;
  };

  template <class F>
  void notify(F change) {
    {
      std::lock_guard lock(mutex_);
      change();
    }
    changed_.notify_all();
  }

  const TempDir& dir_;
  tls::testing::Pki pki_;
  std::optional<store::HistoryStore> store_;
  std::unique_ptr<boost::asio::io_context> server_io_;
  bool manual_server_time_ = false;
  ManualClock server_clock_;
  std::unique_ptr<net::ManualSleeper> server_sleeper_;
  std::unique_ptr<federation::FederationServer> server_;
  std::thread server_thread_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>
      server_work_;
  std::uint16_t port_ = 0;
  std::vector<std::unique_ptr<Client>> clients_;
  std::mutex mutex_;
  std::condition_variable changed_;
  // Atomic: written under mutex_ (so waiters miss no change) and read by tests without it.
  std::atomic<int> rounds_committed_{0};
  std::atomic<int> rounds_failed_{0};
  std::atomic<int> online_{0};
  std::atomic<std::optional<store::RunState>> ended_;
};

}  // namespace fedcore::testing
