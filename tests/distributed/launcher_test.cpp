// fedcore-dist as processes: launch, a dead worker, a peer noticing the death within the
// operation deadline, and restarts from the last checkpoint. Uses the real binary on
// 127.0.0.1 and a slice of Fashion-MNIST.
#include "distributed/launcher.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <signal.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "distributed/train_support.hpp"
#include "shared/util/source_tree.hpp"
#include "tests/support/build_outputs.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::distributed {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

const std::vector<std::string> kSmallJob = {"--train-samples", "1024",
                                            "--test-samples",  "200",
                                            "--batch",         "16",
                                            "--epochs",        "1",
                                            "--model",         R"({"type":"mlp","hidden":[32]})",
                                            "--data-dir",      FEDCORE_FASHION_MNIST_DIR};

struct Process {
  pid_t pid = -1;
};

// `output_path`: where the process's standard output and error go (empty: inherited).
Process start(const std::vector<std::string>& args, const std::string& output_path = {}) {
  std::vector<char*> argv;
  const std::string exe = fedcore::testing::dist_binary();
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    if (!output_path.empty()) {
      const int fd = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
        _exit(126);
    }
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  return {pid};
}

// Waits for the process to exit, at most `bound`; kills it and fails the test if it
// does not. Returns the exit status (128 + signal for a signal).
int wait_exit(Process p, std::chrono::seconds bound) {
  const auto until = SteadyClock::now() + bound;
  int status = 0;
  while (waitpid(p.pid, &status, WNOHANG) == 0) {
    if (SteadyClock::now() > until) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      ADD_FAILURE() << "process did not exit within " << bound.count() << " s";
      return -1;
    }
    std::this_thread::sleep_for(20ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, false);
}

TEST(Launcher, TwoWorkersTrainAndReportIdenticalParameters) {
  testing::TempDir dir;
  const std::string report = dir.path("run.json");
  const int code = wait_exit(
      start(with({"launch", "--nproc", "2", "--"}, with(kSmallJob, {"--report", report}))), 120s);
  ASSERT_EQ(code, 0);
  const auto j = read_json(report);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["world"], 2);
  // Two workers on one host: the gradients' bytes went through shared memory.
  EXPECT_EQ(j["transport"], "tcp+shm");
  for (const auto& rank : j["ranks"])
    EXPECT_GT(rank["shared_memory_bytes_sent"].get<double>(), 0.0);
  EXPECT_EQ(j["global_batch"], 32);
  EXPECT_EQ(j["steps"], 1024 / 32);
  EXPECT_EQ(j["params_identical_on_all_ranks"], true);
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][0]["param_crc32"], j["ranks"][1]["param_crc32"]);
  EXPECT_GT(j["ranks"][1]["cpu_seconds"].get<double>(), 0.0);
  EXPECT_GT(j["ranks"][1]["peak_rss_mb"].get<double>(), 1.0);
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.3);  // ten classes: chance is 0.1
  // Bound by default: with at least two CPUs, each rank has its own, none shared.
  const auto allowed = allowed_cpus();
  const auto cpus0 = j["ranks"][0]["cpus"].get<std::vector<int>>();
  const auto cpus1 = j["ranks"][1]["cpus"].get<std::vector<int>>();
  if (allowed.size() >= 2 && allowed.back() < kMaskedCpus) {
    EXPECT_EQ(cpus0.size(), allowed.size() / 2);
    EXPECT_EQ(cpus1.size(), allowed.size() / 2);
    for (int cpu : cpus0)
      EXPECT_EQ(std::count(cpus1.begin(), cpus1.end(), cpu), 0) << "CPU " << cpu << " shared";
    // --overlap auto: a communication thread only when it has a CPU besides the one
    // compute thread.
    EXPECT_EQ(j["overlap"], allowed.size() / 2 > 1);
  }
}

TEST(Launcher, BindNoneLeavesEveryWorkerOnEveryCpu) {
  testing::TempDir dir;
  const std::string report = dir.path("run.json");
  const int code = wait_exit(start(with({"launch", "--nproc", "2", "--bind", "none", "--"},
                                        with(kSmallJob, {"--max-steps", "2", "--report", report}))),
                             120s);
  ASSERT_EQ(code, 0);
  const auto j = read_json(report);
  ASSERT_FALSE(j.is_discarded());
  const auto allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  if (allowed.back() < kMaskedCpus) {
    EXPECT_EQ(j["ranks"][0]["cpus"].get<std::vector<int>>(), allowed);
    EXPECT_EQ(j["ranks"][1]["cpus"].get<std::vector<int>>(), allowed);
  }
  EXPECT_EQ(j["overlap"], allowed.size() > 1);
}

TEST(CpuBlocks, OneEqualBlockPerRankWhenThereAreEnoughCpus) {
  using Blocks = std::vector<std::vector<int>>;
  EXPECT_EQ(cpu_blocks(2, CpuBinding::automatic, {0, 1}), (Blocks{{0}, {1}}));
  EXPECT_EQ(cpu_blocks(2, CpuBinding::automatic, {0, 1, 2, 3, 4}), (Blocks{{0, 1}, {2, 3}}));
  EXPECT_EQ(cpu_blocks(1, CpuBinding::automatic, {3, 5}), (Blocks{{3, 5}}));
  EXPECT_EQ(cpu_blocks(3, CpuBinding::automatic, {0, 1}), (Blocks{{}, {}, {}}));  // too few
  EXPECT_EQ(cpu_blocks(2, CpuBinding::none, {0, 1}), (Blocks{{}, {}}));
}

// Rank 1 dies after step 3; rank 0 must notice through its collectives and exit with 3
// (group failure), well within its 20 s operation deadline.
TEST(Launcher, SurvivingWorkerExitsNonZeroWhenAPeerDies) {
  const std::string port = std::to_string(pick_free_port("127.0.0.1"));
  const auto job = with(kSmallJob, {"--op-timeout-ms", "20000", "--test-crash-rank", "1",
                                    "--test-crash-after-step", "3", "--no-eval"});
  const auto start_time = SteadyClock::now();
  auto r0 = start(
      with({"worker", "--rank", "0", "--world", "2", "--rendezvous", "127.0.0.1:" + port}, job));
  auto r1 = start(
      with({"worker", "--rank", "1", "--world", "2", "--rendezvous", "127.0.0.1:" + port}, job));
  EXPECT_EQ(wait_exit(r1, 60s), 17);
  EXPECT_EQ(wait_exit(r0, 60s), 3);
  EXPECT_LT(SteadyClock::now() - start_time, 20s);
}

TEST(Launcher, DeadWorkerStopsTheJobWithoutRestarts) {
  const auto start_time = SteadyClock::now();
  const int code = wait_exit(
      start(with({"launch", "--nproc", "2", "--"},
                 with(kSmallJob, {"--test-crash-rank", "0", "--test-crash-after-step", "2"}))),
      60s);
  EXPECT_EQ(code, 17);
  EXPECT_LT(SteadyClock::now() - start_time, 30s);
}

TEST(Launcher, RestartResumesFromTheLastCheckpoint) {
  testing::TempDir dir;
  const std::string report = dir.path("run.json");
  const int code =
      wait_exit(start(with({"launch", "--nproc", "2", "--max-restarts", "1", "--"},
                           with(kSmallJob, {"--checkpoint-dir", dir.path(), "--checkpoint-every",
                                            "5", "--test-crash-rank", "1",
                                            "--test-crash-after-step", "7", "--report", report}))),
                120s);
  ASSERT_EQ(code, 0);
  const auto j = read_json(report);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["start_step"], 5);
  EXPECT_EQ(j["steps"], 32);
  EXPECT_EQ(j["params_identical_on_all_ranks"], true);
}

TEST(Launcher, RendezvousFailsWhenARankNeverJoins) {
  const std::string port = std::to_string(pick_free_port("127.0.0.1"));
  const auto start_time = SteadyClock::now();
  auto r0 = start(with({"worker", "--rank", "0", "--world", "2", "--rendezvous",
                        "127.0.0.1:" + port, "--join-timeout-ms", "1500"},
                       kSmallJob));
  EXPECT_EQ(wait_exit(r0, 30s), 3);
  EXPECT_LT(SteadyClock::now() - start_time, 25s);
}

}  // namespace
}  // namespace fedcore::distributed

namespace fedcore::distributed {
namespace {

TEST(Launcher, PipelineOfTwoStagesAsProcesses) {
  testing::TempDir dir;
  const std::string report = dir.path("pipe.json");
  const int code = wait_exit(
      start(with({"launch", "--nproc", "2", "--"},
                 with(kSmallJob, {"--mode", "pipeline", "--stages", "2", "--micro-batches", "4",
                                  "--max-steps", "10", "--report", report}))),
      120s);
  ASSERT_EQ(code, 0);
  const auto j = read_json(report);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["mode"], "pipeline");
  EXPECT_EQ(j["stages"], 2);
  EXPECT_EQ(j["replicas"], 1);
  EXPECT_EQ(j["steps"], 10);
  ASSERT_EQ(j["ranks"].size(), 2u);
  // The two stages split the layers between them.
  EXPECT_EQ(j["ranks"][0]["layers"][0], 0);
  EXPECT_EQ(j["ranks"][0]["layers"][1], j["ranks"][1]["layers"][0]);
  EXPECT_GT(j["ranks"][1]["final_loss"].get<double>(), 0.0);
}

}  // namespace
}  // namespace fedcore::distributed

namespace fedcore::distributed {
namespace {

// Two workers over mutual TLS with job certificates made by certs/fedcore-pki.
TEST(Launcher, TwoWorkersOverTls) {
  testing::TempDir dir;
  const std::string pki = dir.path("pki");
  const std::string script = fedcore::source_path("certs/fedcore-pki") + " --dir " + pki;
  for (const char* step : {" init", " server fedcore-server", " client worker"}) {
    ASSERT_EQ(std::system((script + step + " >/dev/null 2>&1").c_str()), 0) << step;
  }
  const std::string report = dir.path("tls.json");
  const int code = wait_exit(
      start(with({"launch", "--nproc", "2", "--"},
                 with(kSmallJob,
                      {"--transport", "tls", "--tls-ca", pki + "/ca.pem", "--tls-crl",
                       pki + "/crl.pem", "--tls-server-cert", pki + "/server/fedcore-server.pem",
                       "--tls-server-key", pki + "/server/fedcore-server.key", "--tls-client-cert",
                       pki + "/clients/worker.pem", "--tls-client-key", pki + "/clients/worker.key",
                       "--max-steps", "8", "--report", report}))),
      120s);
  ASSERT_EQ(code, 0);
  const auto j = read_json(report);
  ASSERT_FALSE(j.is_discarded());
  // TLS keeps every byte on the encrypted links unless --shm on asks otherwise.
  EXPECT_EQ(j["transport"], "tls");
  for (const auto& rank : j["ranks"])
    EXPECT_EQ(rank["shared_memory_bytes_sent"].get<double>(), 0.0);
  EXPECT_EQ(j["steps"], 8);
  EXPECT_EQ(j["params_identical_on_all_ranks"], true);
}

}  // namespace
}  // namespace fedcore::distributed

namespace fedcore::distributed {
namespace {

// Parameter-server ASGD as three processes over TCP: one server, two workers.
TEST(Launcher, ParameterServerWithThreeProcesses) {
  testing::TempDir dir;
  const std::string report = dir.path("ps.json");
  const int code = wait_exit(
      start(with({"launch", "--nproc", "3", "--"},
                 with(kSmallJob, {"--async", "ps", "--max-staleness", "4", "--staleness-lr",
                                  "inverse", "--lr", "0.1", "--report", report}))),
      120s);
  ASSERT_EQ(code, 0);
  const auto j = read_json(report);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["mode"], "ps-asgd");
  EXPECT_EQ(j["world"], 3);
  // 1024 samples, 2 workers x batch 16: 32 global batches, 64 updates of 16 samples.
  EXPECT_EQ(j["steps"], 64);
  const auto& ps = j["parameter_server"];
  EXPECT_EQ(ps["workers"], 2);
  EXPECT_EQ(ps["updates"], 64);
  EXPECT_LE(ps["max_staleness"].get<int>(), 4);
  EXPECT_EQ(ps["max_staleness_allowed"], 4);
  EXPECT_EQ(ps["gradients_received"].get<int>(),
            64 + ps["discarded_stale"].get<int>() + ps["unused_at_stop"].get<int>());
  EXPECT_EQ(j["params_identical_on_all_ranks"], true);
  EXPECT_GT(j["samples_per_second"].get<double>(), 0.0);
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.3);  // ten classes: chance is 0.1
}

TEST(Launcher, ParameterServerRefusesOneRank) {
  const int code = wait_exit(
      start(with({"launch", "--nproc", "1", "--"}, with(kSmallJob, {"--async", "ps"}))), 60s);
  EXPECT_EQ(code, 2);
}

// --log-format json reaches the workers' own diagnostics too: a worker's refusal is one
// JSON object with the component and level, not a bare text line, and nothing the job
// prints is anything else (it trains nothing, so there is no report line).
TEST(Launcher, WorkerDiagnosticsFollowTheJsonLogFormat) {
  testing::TempDir dir;
  const std::string err = dir.path("output.log");
  const int code = wait_exit(start(with({"launch", "--log-format", "json", "--nproc", "1", "--"},
                                        with(kSmallJob, {"--async", "ps"})),
                                   err),
                             60s);
  EXPECT_EQ(code, 2);
  std::ifstream in(err);
  std::string line;
  int lines = 0;
  bool refusal_seen = false;
  while (std::getline(in, line)) {
    if (line.empty())
      continue;
    ++lines;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << "not a JSON line: " << line;
    EXPECT_EQ(j.value("component", ""), "dist") << line;
    if (j.value("message", "").find("--async ps needs at least 2 ranks") != std::string::npos) {
      refusal_seen = true;
      EXPECT_EQ(j.value("level", ""), "error") << line;
    }
  }
  EXPECT_GT(lines, 0);
  EXPECT_TRUE(refusal_seen);
}

// A worker process dies after its third gradient: the server (and the other worker)
// exit with 3, well within the 20 s operation deadline.
TEST(Launcher, ParameterServerFailsWhenAWorkerDies) {
  const std::string port = std::to_string(pick_free_port("127.0.0.1"));
  const auto job =
      with(kSmallJob, {"--async", "ps", "--op-timeout-ms", "20000", "--test-crash-rank", "2",
                       "--test-crash-after-step", "3", "--no-eval"});
  const auto start_time = SteadyClock::now();
  std::vector<Process> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.push_back(start(with({"worker", "--rank", std::to_string(r), "--world", "3",
                                "--rendezvous", "127.0.0.1:" + port},
                               job)));
  }
  EXPECT_EQ(wait_exit(ranks[2], 60s), 17);
  EXPECT_EQ(wait_exit(ranks[0], 60s), 3);
  EXPECT_EQ(wait_exit(ranks[1], 60s), 3);
  EXPECT_LT(SteadyClock::now() - start_time, 20s);
}

}  // namespace
}  // namespace fedcore::distributed
