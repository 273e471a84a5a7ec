// The real fedcore-server as a child process, for tests that kill it (crash_resume_test,
// kill_loop_test), and what those tests do around it: a server config file, client
// daemons on their own threads that reconnect by themselves, and polling the history
// file while the server writes it.
//
// Targets that include this define fedcore::testing::server_binary() (the fedcore-server binary).
// Every wait here is bounded; the destructors kill and reap what is still running.
#pragma once

#include <chrono>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <memory>
#include <signal.h>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

#include "client/daemon.hpp"
#include "server/store/history_store.hpp"
#include "shared/util/source_tree.hpp"
#include "tests/support/build_outputs.hpp"
#include "tests/tls/tls_support.hpp"

extern char** environ;

namespace fedcore::testing {

// A loopback port nobody listened on a moment ago (the kernel's choice).
inline std::uint16_t free_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor probe(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return probe.local_endpoint().port();
}

// The server config the crash tests use: federation on 127.0.0.1:`port`, history in `db`,
// checkpoints under `checkpoint_dir` (the newest `keep_checkpoints` rounds' files of each
// run, 0: all), the PKI's server identity, heartbeats every second.
inline void write_server_config(const std::string& path, std::uint16_t port, const std::string& db,
                                const std::string& checkpoint_dir, const tls::testing::Pki& pki,
                                int keep_checkpoints = 0) {
  std::ofstream config(path);
  config << R"({"listen":"127.0.0.1","port":)" << port << R"(,"database":")" << db
         << R"(","checkpoint_dir":")" << checkpoint_dir << R"(","keep_checkpoints":)"
         << keep_checkpoints << R"(,"heartbeat_seconds":1,"idle_timeout_s":10,)"
         << R"("tls":{"ca":")" << pki.ca() << R"(","cert":")" << pki.server_cert() << R"(","key":")"
         << pki.server_key() << R"(","crl":")" << pki.crl() << R"("}})";
}

// One fedcore-server process: started by the constructor with `args`, stdout and stderr
// appended to `log`, this process's environment plus `env` ("NAME=value" entries, which
// replace inherited ones of the same name).
class ServerProcess {
 public:
  ServerProcess(const std::vector<std::string>& args, const std::string& log,
                const std::vector<std::string>& env = {}) {
    std::string binary = fedcore::testing::server_binary();
    std::vector<std::string> argv_text{binary};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<std::string> env_text;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const auto name = entry.substr(0, entry.find('=') + 1);
      bool replaced = false;
      for (const auto& extra : env) {
        replaced = replaced || extra.starts_with(name);
      }
      if (!replaced) {
        env_text.push_back(entry);
      }
    }
    env_text.insert(env_text.end(), env.begin(), env.end());
    auto argv = pointers(argv_text);
    auto envp = pointers(env_text);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    EXPECT_EQ(posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ServerProcess() { kill_now(); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // True while the process has not exited; once it has, its status is kept in
  // exit_status() and the process is reaped.
  bool running() {
    if (pid_ <= 0) {
      return false;
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = status;
      pid_ = -1;
      return false;
    }
    return true;
  }
  int exit_status() const noexcept { return exit_status_; }
  // The process id while it runs (for /proc); -1 once it is reaped.
  pid_t pid() const noexcept { return pid_; }

  // SIGKILL and reap (nothing if the process already exited and was reaped).
  void kill_now() {
    if (pid_ <= 0) {
      return;  // never kill(-1, ...): that would signal every process we may signal
    }
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    exit_status_ = status;
    pid_ = -1;
  }
  // SIGTERM, then wait up to `bound` for the exit; returns the exit status or -1.
  int terminate(std::chrono::seconds bound) {
    if (!running()) {
      return WIFEXITED(exit_status_) ? WEXITSTATUS(exit_status_) : -1;
    }
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!running()) {
        return WIFEXITED(exit_status_) ? WEXITSTATUS(exit_status_) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a child's exit
    }
    return -1;
  }

 private:
  static std::vector<char*> pointers(std::vector<std::string>& text) {
    std::vector<char*> out;
    for (auto& t : text) {
      out.push_back(t.data());
    }
    out.push_back(nullptr);
    return out;
  }

  pid_t pid_ = -1;
  int exit_status_ = 0;
};

// Client daemons, each on its own io_context and thread, reconnecting to the server by
// themselves whenever it goes away. stop() (or the destructor) stops and joins them all.
class DaemonThreads {
 public:
  DaemonThreads() = default;
  ~DaemonThreads() { stop(); }
  DaemonThreads(const DaemonThreads&) = delete;
  DaemonThreads& operator=(const DaemonThreads&) = delete;

  // Creates and starts a daemon; the failure, if any, is reported and nothing started.
  void start(const client::ClientOptions& options) {
    auto d = std::make_unique<Daemon>();
    auto daemon = client::ClientDaemon::create(d->io, options);
    ASSERT_TRUE(daemon) << daemon.error().to_string();
    d->daemon = std::move(*daemon);
    boost::asio::co_spawn(d->io, d->daemon->run(), boost::asio::detached);
    d->thread = std::thread([io = &d->io] { io->run(); });
    daemons_.push_back(std::move(d));
  }

  void stop() {
    for (auto& d : daemons_) {
      boost::asio::post(d->io, [p = d->daemon.get()] { p->stop(); });
    }
    for (auto& d : daemons_) {
      d->thread.join();
    }
    daemons_.clear();
  }

 private:
  struct Daemon {
    boost::asio::io_context io;
    std::unique_ptr<client::ClientDaemon> daemon;
    std::thread thread;
  };
  std::vector<std::unique_ptr<Daemon>> daemons_;
};

// The options of site `index` of `sites` on the breast-cancer CSV (an IID share of it),
// connecting to 127.0.0.1:`port` as `id`, with short reconnect waits.
inline client::ClientOptions breast_cancer_site(const tls::testing::Pki& pki, const std::string& id,
                                                std::uint16_t port, std::size_t index,
                                                std::size_t sites) {
  client::ClientOptions options;
  options.port = port;
  options.tls = pki.client_config(id);
  options.data.format = "csv";
  options.data.path = fedcore::source_path("data/breast_cancer_wisconsin.csv");
  options.data.label_column = "benign";
  options.data.partition = "iid";
  options.data.partition_clients = sites;
  options.data.partition_index = index;
  options.initial_backoff = std::chrono::milliseconds(50);
  options.max_backoff = std::chrono::milliseconds(300);
  return options;
}

// Polls run `run_id` in the history at `db` (a read-only connection per look, as the
// server may be killed at any time) until `done(last_round)` or the timeout; checks on
// every look that last_round never decreases below `high_water`, and raises it. Returns
// the last value seen (-1: the run was never readable).
inline std::int64_t watch_rounds(const std::string& db, std::int64_t& high_water,
                                 const std::function<bool(std::int64_t)>& done,
                                 std::chrono::milliseconds timeout, std::int64_t run_id = 1) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::int64_t last = -1;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto store = store::HistoryStore::open_read_only(db); store) {
      if (auto run = store->get_run(run_id); run) {
        last = run->last_round;
        EXPECT_GE(last, high_water) << "round numbers went back";
        high_water = std::max(high_water, last);
        if (done(last)) {
          return last;
        }
      }
    }
    // Polling the database file. Often: a round can take well under a millisecond, and a
    // watcher that looks every 5 ms is ten rounds late (the kill loop's mid-run kills).
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return last;
}

}  // namespace fedcore::testing
