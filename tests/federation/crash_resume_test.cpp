// The real fedcore-server process is killed with SIGKILL at several points of a run and
// restarted; client daemons (in this process) reconnect by themselves. Afterwards the
// history must hold every round exactly once, in order, with its checkpoint, and the
// database must pass PRAGMA integrity_check. Round numbers must never go back.
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/federation/federation_fixture.hpp"
#include "tests/federation/history_checks.hpp"
#include "tests/federation/server_process.hpp"

namespace fedcore {
namespace {

using testing::breast_cancer_site;
using testing::DaemonThreads;
using testing::ServerProcess;
using testing::TempDir;
using testing::watch_rounds;

TEST(CrashResume, ServerKilledMidRunResumesFromTheLastCommittedRound) {
  TempDir dir;
  testing::Federation pki_only(dir);  // only for its PKI helper
  for (int i = 1; i <= 3; ++i) {
    pki_only.add_client_certificate("site-" + std::to_string(i));
  }
  const auto& pki = pki_only.pki();
  const auto port = testing::free_port();
  const auto db = dir.path("server.db");
  testing::write_server_config(dir.path("server.json"), port, db, dir.path("ckpt"), pki);
  {
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

  DaemonThreads daemons;
  auto server = std::make_unique<ServerProcess>(first_start, log);
  for (std::size_t i = 1; i <= 3; ++i) {
    daemons.start(breast_cancer_site(pki, "site-" + std::to_string(i), port, i - 1, 3));
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
  daemons.stop();

  // Every round 1..30 once, with an intact checkpoint whose CRC is the store's, nothing
  // else referenced, PRAGMA integrity_check ok (tests/federation/history_checks.hpp).
  const auto history = testing::expect_intact_history(db);
  EXPECT_EQ(history.state, store::RunState::finished);
  EXPECT_EQ(history.last_round, 30);
  EXPECT_EQ(history.checkpoints.size(), 30u);
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
