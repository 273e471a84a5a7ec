// The real fedcore-server process is killed with SIGKILL at several points of a run and
// restarted; client daemons (in this process) reconnect by themselves. Afterwards the
// history must hold every round exactly once, in order, with its checkpoint, and the
// database must pass PRAGMA integrity_check. Round numbers must never go back.
#include <fstream>
#include <numeric>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <boost/asio/ip/tcp.hpp>
#include <gtest/gtest.h>

#include "shared/model/param_io.hpp"
#include "shared/util/checksum.hpp"
#include "tests/federation/federation_fixture.hpp"

extern char** environ;

namespace fedcore {
namespace {

using testing::TempDir;

std::uint16_t free_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor probe(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return probe.local_endpoint().port();
}

class ServerProcess {
 public:
  ServerProcess(const std::vector<std::string>& args, const std::string& log) {
    std::vector<char*> argv;
    std::string binary = FEDCORE_SERVER_BIN;
    argv.push_back(binary.data());
    std::vector<std::string> copies = args;
    for (auto& a : copies) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    EXPECT_EQ(posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill_now();
    }
  }
  void kill_now() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  // SIGTERM, then wait up to `bound` for the exit; returns the exit status or -1.
  int terminate(std::chrono::seconds bound) {
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + bound;
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a child's exit
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
};

// Polls the history (a read-only connection per look) until `done(last_round)` or the
// deadline; checks on every look that last_round never decreases.
std::int64_t watch_rounds(const std::string& db, std::int64_t& high_water,
                          std::function<bool(std::int64_t)> done, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::int64_t last = -1;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto store = store::HistoryStore::open_read_only(db); store) {
      if (auto run = store->get_run(1); run) {
        last = run->last_round;
        EXPECT_GE(last, high_water) << "round numbers went back";
        high_water = std::max(high_water, last);
        if (done(last)) {
          return last;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling the database file
  }
  return last;
}

TEST(CrashResume, ServerKilledMidRunResumesFromTheLastCommittedRound) {
  TempDir dir;
  testing::Federation pki_only(dir);  // only for its PKI helper
  for (int i = 1; i <= 3; ++i) {
    pki_only.add_client_certificate("site-" + std::to_string(i));
  }
  const auto& pki = pki_only.pki();
  const auto port = free_port();
  const auto db = dir.path("server.db");
  {
    std::ofstream config(dir.path("server.json"));
    config << R"({"listen":"127.0.0.1","port":)" << port << R"(,"database":")" << db
           << R"(","checkpoint_dir":")" << dir.path("ckpt")
           << R"(","heartbeat_seconds":1,"idle_timeout_s":10,)"
           << R"("tls":{"ca":")" << pki.ca() << R"(","cert":")" << pki.server_cert()
           << R"(","key":")" << pki.server_key() << R"(","crl":")" << pki.crl() << R"("}})";
    std::ofstream run(dir.path("run.json"));
    run << R"({"name":"crash","model":{"type":"mlp","hidden":[64]},"rounds":30,"clients_per_round":3,
      "min_clients":3,"local_epochs":24,"batch_size":16,"optimizer":{"kind":"sgd","lr":0.05},"round_timeout_s":30,
      "wait_for_clients_s":30,"seed":5})";
  }
  // The admin API on an ephemeral port: a fixed one (8443) may be taken by a dashboard, or
  // by a server an aborted earlier run of this test left behind.
  const std::vector<std::string> first_start{
      "--config", dir.path("server.json"), "--run", dir.path("run.json"), "--api-port", "0"};
  const std::vector<std::string> restart{"--config", dir.path("server.json"), "--api-port", "0"};
  const auto log = dir.path("server.log");

  std::vector<std::unique_ptr<boost::asio::io_context>> ios;
  std::vector<std::unique_ptr<client::ClientDaemon>> daemons;
  std::vector<std::thread> threads;
  auto server = std::make_unique<ServerProcess>(first_start, log);
  for (int i = 1; i <= 3; ++i) {
    client::ClientOptions options;
    options.port = port;
    options.tls = pki.client_config("site-" + std::to_string(i));
    options.data.format = "csv";
    options.data.path = FEDCORE_SOURCE_DIR "/data/breast_cancer_wisconsin.csv";
    options.data.label_column = "benign";
    options.data.partition = "iid";
    options.data.partition_clients = 3;
    options.data.partition_index = static_cast<std::size_t>(i - 1);
    options.initial_backoff = std::chrono::milliseconds(50);
    options.max_backoff = std::chrono::milliseconds(300);
    ios.push_back(std::make_unique<boost::asio::io_context>());
    auto daemon = client::ClientDaemon::create(*ios.back(), options);
    ASSERT_TRUE(daemon) << daemon.error().to_string();
    daemons.push_back(std::move(*daemon));
    boost::asio::co_spawn(*ios.back(), daemons.back()->run(), boost::asio::detached);
    threads.emplace_back([io = ios.back().get()] { io->run(); });
  }

  std::int64_t high_water = 0;
  // Kill points: once rounds 2, 5 and 7 have committed, at different offsets into the
  // next round (0, 15 and 40 ms: before, during and after the clients' training). Rounds
  // take milliseconds, so each kill also waits for a round that the *current* server
  // committed (one past what the previous server left): otherwise, when this thread
  // lags, a kill could land on a server still starting up, or after the run ended. The
  // run has 30 rounds so that it is still going at the third kill.
  const std::pair<std::int64_t, int> kills[] = {{2, 0}, {5, 15}, {7, 40}};
  std::int64_t left_by_previous = 0;
  for (const auto& [after_round, delay_ms] : kills) {
    const auto target = std::max(after_round, left_by_previous + 1);
    const auto seen = watch_rounds(
        db, high_water, [&](std::int64_t r) { return r >= target; }, std::chrono::seconds(90));
    ASSERT_GE(seen, target) << "the run stalled before round " << target;
    std::this_thread::sleep_for(
        std::chrono::milliseconds(delay_ms));  // the kill's offset into the round
    server->kill_now();
    left_by_previous = watch_rounds(
        db, high_water, [](std::int64_t) { return true; }, std::chrono::seconds(10));
    ASSERT_LT(left_by_previous, 30) << "the run ended before the kill";
    server = std::make_unique<ServerProcess>(restart, log);
  }
  const auto final_round = watch_rounds(
      db, high_water, [](std::int64_t r) { return r >= 30; }, std::chrono::seconds(120));
  EXPECT_EQ(final_round, 30);
  // A clean stop: SIGTERM ends the process within its bound, with status 0.
  EXPECT_EQ(server->terminate(std::chrono::seconds(15)), 0);
  for (auto& d : daemons) {
    boost::asio::post(*ios[static_cast<std::size_t>(&d - daemons.data())],
                      [p = d.get()] { p->stop(); });
  }
  for (auto& t : threads) {
    t.join();
  }

  auto history = store::HistoryStore::open_read_only(db);
  ASSERT_TRUE(history);
  auto run = history->get_run(1);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->state, store::RunState::finished);
  auto rounds = history->list_rounds(1);
  ASSERT_TRUE(rounds);
  std::vector<std::int64_t> committed;
  for (const auto& r : *rounds) {
    if (r.state == store::RoundState::committed) {
      committed.push_back(r.round);
    }
  }
  std::vector<std::int64_t> expected(30);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(committed, expected) << "every round committed exactly once, in order";
  auto checkpoints = history->list_checkpoints(1);
  ASSERT_TRUE(checkpoints);
  ASSERT_EQ(checkpoints->size(), 30u);
  for (const auto& c : *checkpoints) {
    std::ifstream in(c.ref.path, std::ios::binary);
    ASSERT_TRUE(in) << c.ref.path;
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(static_cast<std::int64_t>(bytes.size()), c.ref.size_bytes);
    // The crc32 column is the CRC of the content before the file's CRC trailer
    // (docs/schema.md), not of the whole file, whose CRC is the same for every file.
    ASSERT_GT(bytes.size(), 4u) << c.ref.path;
    EXPECT_EQ(crc32(std::as_bytes(std::span(bytes)).first(bytes.size() - 4)), c.ref.crc32)
        << c.ref.path;
    EXPECT_TRUE(model::load_params(c.ref.path)) << c.ref.path;
  }
  auto integrity = history->integrity_check();
  ASSERT_TRUE(integrity);
  EXPECT_TRUE(*integrity);
  // The server's own log shows the three resumptions (the kills really interrupted it).
  std::ifstream server_log(log);
  std::string line;
  int resumed = 0;
  while (std::getline(server_log, line)) {
    resumed += line.find("resumes after round") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(resumed, 3);
}

}  // namespace
}  // namespace fedcore
