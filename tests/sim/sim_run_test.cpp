// Whole simulated federations on the breast-cancer CSV (455 training samples): small and
// fast, but the real server, real daemons, real TLS and real SQLite.
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>
#include <tuple>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/store/history_store.hpp"
#include "shared/model/federated_vector.hpp"
#include "shared/model/param_io.hpp"
#include "shared/util/source_tree.hpp"
#include "sim/federation_run.hpp"
#include "sim/report.hpp"
#include "sim/sim_data.hpp"
#include "sim/simulation.hpp"
#include "tests/api/https_client.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::sim {
namespace {

using ::testing::HasSubstr;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(slurp(path));
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> cells;
    std::istringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');) {
      cells.push_back(cell);
    }
    rows.push_back(std::move(cells));
  }
  return rows;
}

// The column named `name` of a CSV, without its header.
std::vector<std::string> column(const std::vector<std::vector<std::string>>& rows,
                                const std::string& name) {
  std::vector<std::string> out;
  if (rows.empty()) {
    return out;
  }
  const auto at = std::find(rows[0].begin(), rows[0].end(), name) - rows[0].begin();
  for (std::size_t r = 1; r < rows.size(); ++r) {
    out.push_back(rows[r].at(static_cast<std::size_t>(at)));
  }
  return out;
}

SimOptions small_run(const testing::TempDir& dir, const std::string& name) {
  SimOptions o;
  o.dataset = "breast-cancer";
  o.model = "logreg";
  o.clients = 4;
  o.rounds = 3;
  o.lr = 0.1f;
  o.batch = 16;
  o.seed = 7;
  o.out = dir.path(name);
  o.round_timeout_s = 60;
  return o;
}

result<SimulationOutcome> run(const SimOptions& o) {
  std::FILE* sink = std::tmpfile();
  Progress progress(OutputMode::quiet, sink, false);
  auto outcome = run_simulation(o, progress);
  std::fclose(sink);
  return outcome;
}

// The ranks of a simulation across processes, as threads of this one: what mpirun's
// ranks do through MPI (sim/mpi_cluster.cpp), they do through one shared meeting point.
class ThreadCluster final : public Cluster {
 public:
  struct Meeting {
    std::mutex mutex;
    std::condition_variable changed;
    std::optional<std::uint64_t> value;
    int size = 0;
    int arrived = 0;
  };
  ThreadCluster(Meeting& meeting, int rank) : meeting_(meeting), rank_(rank) {}
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return meeting_.size; }
  result<std::uint64_t> share_from_rank0(std::uint64_t value,
                                         std::chrono::milliseconds timeout) override {
    std::unique_lock lock(meeting_.mutex);
    if (rank_ == 0) {
      meeting_.value = value;
      meeting_.changed.notify_all();
    }
    if (!meeting_.changed.wait_for(lock, timeout, [&] { return meeting_.value.has_value(); }))
      return fail(errc::deadline_exceeded, "rank 0 shared nothing");
    return *meeting_.value;
  }
  result<void> barrier(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(meeting_.mutex);
    ++meeting_.arrived;
    meeting_.changed.notify_all();
    if (!meeting_.changed.wait_for(lock, timeout,
                                   [&] { return meeting_.arrived >= meeting_.size; }))
      return fail(errc::deadline_exceeded, "the other ranks did not arrive");
    return {};
  }

 private:
  Meeting& meeting_;
  int rank_;
};

// More sites than the process may open sockets for: said at once, before anything starts,
// instead of a connection deadline minutes later.
TEST(SimRun, MoreSitesThanOpenFilesAllowIsRefusedAtOnceWithTheNumbers) {
  testing::TempDir dir;
  auto o = small_run(dir, "out");
  o.clients = 2'000'000;  // 4,000,256 descriptors: above any limit Linux allows (nr_open)
  auto outcome = run(o);
  ASSERT_FALSE(outcome);
  EXPECT_EQ(outcome.error().code, errc::resource_exhausted);
  EXPECT_THAT(outcome.error().message,
              HasSubstr("2000000 clients need about 4000256 open files (two sockets each)"));
  EXPECT_THAT(outcome.error().message, HasSubstr("ulimit -n"));
  EXPECT_FALSE(std::filesystem::exists(o.out + "/history.db")) << "nothing was started";
  ThreadCluster::Meeting alone;
  alone.size = 1;
  EXPECT_EQ(open_files_needed(10'000, Transport::tls, ThreadCluster(alone, 0)), 20'256u);
  // In-process sites hold no descriptor (memory links).
  EXPECT_EQ(open_files_needed(10'000, Transport::inproc, ThreadCluster(alone, 0)), 256u);
  // Across 2 ranks, rank 0 holds its 5,000 sites' sockets and the server's 10,000 ends.
  ThreadCluster::Meeting meeting;
  meeting.size = 2;
  EXPECT_EQ(open_files_needed(10'000, Transport::tls, ThreadCluster(meeting, 0)), 15'256u);
  EXPECT_EQ(open_files_needed(10'000, Transport::tls, ThreadCluster(meeting, 1)), 5'256u);
}

TEST(SimRun, WritesEveryOutputAndTheyParse) {
  testing::TempDir dir;
  auto o = small_run(dir, "out");
  o.baseline = true;
  o.partition = "dirichlet:0.5";
  auto outcome = run(o);
  ASSERT_TRUE(outcome) << outcome.error().to_string();

  const auto rows = read_csv(o.out + "/rounds.csv");
  ASSERT_EQ(rows.size(), 4u);  // header + 3 rounds
  EXPECT_EQ(column(rows, "round"), (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(column(rows, "participants"), (std::vector<std::string>{"4", "4", "4"}));
  for (const auto& a : column(rows, "accuracy")) {
    EXPECT_GT(std::stod(a), 0.8) << "logreg on breast-cancer learns in one round";
  }
  for (const auto& b : column(rows, "bytes_up")) {
    EXPECT_GT(std::stoll(b), 0);
  }

  const auto summary = nlohmann::json::parse(slurp(o.out + "/summary.json"));
  EXPECT_EQ(summary["federated"]["rounds_committed"], 3);
  EXPECT_EQ(summary["federated"]["end_state"], "finished");
  EXPECT_DOUBLE_EQ(summary["federated"]["final_accuracy"].get<double>(), outcome->final_accuracy);
  EXPECT_TRUE(summary["federated"]["rounds_to_target"].contains("0.80"));
  EXPECT_EQ(summary["baseline"]["epochs"], 3);
  EXPECT_GT(summary["baseline"]["final_accuracy"].get<double>(), 0.8);
  EXPECT_EQ(summary["config"]["partition"], "dirichlet:0.5");

  for (const char* plot :
       {"accuracy.svg", "loss.svg", "federated_vs_centralized.svg", "label_distribution.svg"}) {
    const auto svg = slurp(o.out + "/" + plot);
    EXPECT_EQ(svg.rfind("<?xml", 0), 0u) << plot;
    EXPECT_THAT(svg, HasSubstr("</svg>")) << plot;
  }
  EXPECT_EQ(read_csv(o.out + "/baseline.csv").size(), 4u);

  // The SQLite history is the server's own: three committed rounds of one run.
  auto history = store::HistoryStore::open_read_only(o.out + "/history.db");
  ASSERT_TRUE(history) << history.error().to_string();
  auto rounds = history->list_rounds(1);
  ASSERT_TRUE(rounds);
  EXPECT_EQ(rounds->size(), 3u);
  auto clients = history->list_clients();
  ASSERT_TRUE(clients);
  EXPECT_EQ(clients->size(), 4u);
}

TEST(SimRun, SameSeedAndOptionsGiveTheSameNumbers) {
  testing::TempDir dir;
  auto first = small_run(dir, "a");
  first.partition = "shards:2";
  auto second = first;
  second.out = dir.path("b");
  ASSERT_TRUE(run(first));
  ASSERT_TRUE(run(second));
  const auto a = read_csv(first.out + "/rounds.csv");
  const auto b = read_csv(second.out + "/rounds.csv");
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(column(a, "accuracy"), column(b, "accuracy"));
  EXPECT_EQ(column(a, "loss"), column(b, "loss"));
  EXPECT_EQ(column(a, "train_loss"), column(b, "train_loss"));
}

// Fashion-MNIST and an mlp, whose buffers are large enough that their alignment used to
// depend on the heap's history: the second run (same process, heap already churned by the
// first) must still give the first run's numbers, federated and centralized alike.
TEST(SimRun, SameSeedGivesTheSameNumbersOnFashionMnist) {
  testing::TempDir dir;
  SimOptions first;
  first.dataset = "fashion-mnist";
  first.data_path = FEDCORE_FASHION_MNIST_DIR;
  first.model = "mlp";
  first.partition = "dirichlet:0.5";
  first.clients = 3;
  first.rounds = 2;
  first.lr = 0.05f;
  first.momentum = 0.9f;
  first.train_limit = 3000;
  first.test_limit = 1000;
  first.baseline = true;
  first.baseline_epochs = 2;
  first.out = dir.path("a");
  first.round_timeout_s = 120;
  auto second = first;
  second.out = dir.path("b");
  ASSERT_TRUE(run(first));
  ASSERT_TRUE(run(second));
  const auto a = read_csv(first.out + "/rounds.csv");
  const auto b = read_csv(second.out + "/rounds.csv");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(column(a, "accuracy"), column(b, "accuracy"));
  EXPECT_EQ(column(a, "train_loss"), column(b, "train_loss"));
  const auto base_a = read_csv(first.out + "/baseline.csv");
  const auto base_b = read_csv(second.out + "/baseline.csv");
  ASSERT_EQ(base_a.size(), 3u);
  EXPECT_EQ(column(base_a, "train_loss"), column(base_b, "train_loss"));
  EXPECT_EQ(column(base_a, "accuracy"), column(base_b, "accuracy"));
}

// BatchNorm in federated rounds, on a Dirichlet label split with each site's test data in its
// training proportions: averaged, the statistics travel and the global checkpoint carries
// their mean; FedBN (--batch-norm local), the checkpoints' BatchNorm values never move from
// the start (the sites never sent theirs) while the shared layers learn, and the sites
// evaluate with their own.
TEST(SimRun, BatchNormIsAveragedOrKeptAtTheSitesOnADirichletSplit) {
  testing::TempDir dir;
  const auto run_with = [&](const std::string& mode) {
    SimOptions o;
    o.dataset = "fashion-mnist";
    o.data_path = FEDCORE_FASHION_MNIST_DIR;
    o.model = R"({"type": "cnn", "channels": [4, 8], "kernel": 3, "dense": 32,
                  "batch_norm": true})";
    o.partition = "dirichlet:0.3";
    o.site_test = "like-train";
    o.batch_norm = mode;
    o.clients = 4;
    o.rounds = 3;
    o.lr = 0.05f;
    o.momentum = 0.9f;
    o.train_limit = 2000;
    o.test_limit = 1000;
    o.seed = 3;
    o.out = dir.path(mode);
    o.round_timeout_s = 120;
    auto outcome = run(o);
    EXPECT_TRUE(outcome) << (outcome ? "" : outcome.error().to_string());
    const auto summary = nlohmann::json::parse(slurp(o.out + "/summary.json"));
    EXPECT_EQ(summary["federated"]["end_state"], "finished") << mode;
    EXPECT_EQ(summary["config"]["batch_norm"], mode);
    auto history = store::HistoryStore::open_read_only(o.out + "/history.db");
    EXPECT_TRUE(history);
    auto checkpoints = history->list_checkpoints(1);
    EXPECT_TRUE(checkpoints && checkpoints->size() == 3u);
    std::vector<std::vector<float>> saved;
    for (const auto& c : *checkpoints) {
      saved.push_back(model::load_params(c.ref.path)->params);
    }
    return std::make_tuple(read_csv(o.out + "/rounds.csv"), saved);
  };
  const auto [averaged_rows, averaged] = run_with("averaged");
  const auto [local_rows, local] = run_with("local");

  // The layout: conv1 (4 x 3 x 3 x 1, no bias), bn1 (4 + 4), conv2 (9 x 4 x 8), bn2 (8 + 8),
  // fc1, fc2, then the state: bn1 and bn2's running means and variances (24 values).
  const std::size_t state = 2 * (4 + 8);
  ASSERT_EQ(averaged.back().size(), local.back().size());
  const std::size_t params = averaged.back().size() - state;
  const std::vector<model::ValueRange> site{{36, 8}, {36 + 8 + 288, 16}, {params, state}};
  const auto at = [&](const std::vector<float>& v) { return model::gather_ranges(v, site); };
  // Averaged: the running statistics moved (means from 0, variances from 1).
  EXPECT_NE(averaged.front()[params], 0.0f);
  EXPECT_NE(averaged.front()[params + 4], 1.0f);
  EXPECT_NE(at(averaged.front()), at(averaged.back()));
  // FedBN: BatchNorm's values in the checkpoints are the start's, round after round, while
  // the shared layers moved.
  EXPECT_EQ(at(local.front()), at(local.back()));
  EXPECT_EQ(local.back()[params], 0.0f);
  EXPECT_EQ(local.back()[params + 4], 1.0f);
  EXPECT_NE(local.front(), local.back());
  // Both learn; the accuracy columns are the sites' evaluations (FedBN's own column is
  // the federated evaluation: it has no global BatchNorm to test centrally).
  const auto last = [](const auto& rows, const char* name) {
    return std::stod(column(rows, name).back());
  };
  EXPECT_GT(last(averaged_rows, "site_accuracy"), 0.5);
  EXPECT_GT(last(local_rows, "site_accuracy"), 0.5);
  EXPECT_DOUBLE_EQ(last(local_rows, "accuracy"), last(local_rows, "site_accuracy"));
  std::printf("site accuracy after 3 rounds: averaged %.4f, FedBN %.4f\n",
              last(averaged_rows, "site_accuracy"), last(local_rows, "site_accuracy"));
}

TEST(SimRun, RunningTwiceIntoTheSameFolderStartsAfresh) {
  testing::TempDir dir;
  auto o = small_run(dir, "out");
  o.rounds = 1;
  ASSERT_TRUE(run(o));
  ASSERT_TRUE(run(o));
  auto history = store::HistoryStore::open_read_only(o.out + "/history.db");
  ASSERT_TRUE(history);
  auto runs = history->list_runs(10);
  ASSERT_TRUE(runs);
  EXPECT_EQ(runs->size(), 1u);
}

TEST(SimRun, InjectedDropsAreCountedAndRoundsStillCommit) {
  testing::TempDir dir;
  auto o = small_run(dir, "out");
  o.rounds = 4;
  o.drop_prob = 0.4;
  auto outcome = run(o);
  ASSERT_TRUE(outcome) << outcome.error().to_string();
  const auto summary = nlohmann::json::parse(slurp(o.out + "/summary.json"));
  const auto injected = summary["federated"]["faults"]["drops_injected"].get<std::int64_t>();
  // The draws are seeded: with seed 7 some of the 16 selections drop.
  EXPECT_GT(injected, 0);
  std::int64_t dropped = 0;
  for (const auto& d : column(read_csv(o.out + "/rounds.csv"), "dropped")) {
    dropped += std::stoll(d);
  }
  EXPECT_EQ(summary["federated"]["dropped"].get<std::int64_t>(), dropped);
  // Every injected drop is a client the server recorded as dropped (rounds whose every
  // client dropped fail and are retried; their drops are in the failed attempts).
  EXPECT_LE(dropped, injected);
  EXPECT_EQ(summary["federated"]["end_state"], "finished");
  // Each round waits for every site to be back, so the seeded sample and the seeded drops
  // are the same in a second run whatever the timing of the reconnects.
  auto again = o;
  again.out = dir.path("again");
  ASSERT_TRUE(run(again));
  const auto rounds = read_csv(o.out + "/rounds.csv");
  const auto rounds_again = read_csv(again.out + "/rounds.csv");
  EXPECT_EQ(column(rounds, "dropped"), column(rounds_again, "dropped"));
  EXPECT_EQ(column(rounds, "accuracy"), column(rounds_again, "accuracy"));
}

// Issue 18's attack evaluation in miniature: 10 sites, 2 of them sending their step
// reversed and scaled by 4. FedAvg follows the attackers' pull; the coordinate-wise median
// ignores it and keeps the accuracy of the run without attackers.
TEST(SimRun, TheMedianKeepsTheAccuracyThatSignFlippersTakeFromFedAvg) {
  testing::TempDir dir;
  const auto final_accuracy = [&](const std::string& name, const std::string& strategy,
                                  const std::string& attack) {
    auto o = small_run(dir, name);
    o.clients = 10;
    o.rounds = 5;
    o.strategy = strategy;
    if (attack != "none") {
      o.attack = attack;
      o.attack_fraction = 0.2;
    }
    auto outcome = run(o);
    EXPECT_TRUE(outcome) << (outcome ? "" : outcome.error().to_string());
    const auto summary = nlohmann::json::parse(slurp(o.out + "/summary.json"));
    EXPECT_EQ(summary["federated"]["end_state"], "finished") << name;
    return std::stod(column(read_csv(o.out + "/rounds.csv"), "accuracy").back());
  };
  const double clean = final_accuracy("clean", "median", "none");
  const double median = final_accuracy("median", "median", "sign_flip");
  const double fedavg = final_accuracy("fedavg", "fedavg", "sign_flip");
  EXPECT_GT(clean, 0.9);
  EXPECT_GT(median, clean - 0.03) << "median under attack " << median << ", clean " << clean;
  EXPECT_LT(fedavg, median - 0.1) << "fedavg under attack " << fedavg << ", median " << median;
}

// Compressed updates over the real protocol: int8 sends about a quarter of fp32's bytes up
// and reaches the same accuracy; top-k with error feedback sends a few percent and still
// learns. Bytes down are unchanged (the global model is sent as float32).
TEST(SimRun, CompressedUpdatesCutTheBytesUpAndStillLearn) {
  testing::TempDir dir;
  const auto run_with = [&](const std::string& name, const std::string& compression) {
    auto o = small_run(dir, name);
    o.rounds = 5;
    o.compression = compression;
    o.topk_fraction = 0.1;
    auto outcome = run(o);
    EXPECT_TRUE(outcome) << (outcome ? "" : outcome.error().to_string());
    const auto rows = read_csv(o.out + "/rounds.csv");
    std::int64_t up = 0, down = 0;
    for (const auto& b : column(rows, "bytes_up")) {
      up += std::stoll(b);
    }
    for (const auto& b : column(rows, "bytes_down")) {
      down += std::stoll(b);
    }
    return std::tuple(std::stod(column(rows, "accuracy").back()), up, down);
  };
  const auto [plain_accuracy, plain_up, plain_down] = run_with("f32", "none");
  const auto [int8_accuracy, int8_up, int8_down] = run_with("int8", "int8");
  const auto [topk_accuracy, topk_up, topk_down] = run_with("topk", "topk");
  // The global model down as f16 too: 31 parameters are 124 bytes as float32, 64 as f16;
  // each TRAIN's "compression" grows by ,"down":"f16","params":31 (25 bytes).
  auto both = small_run(dir, "both");
  both.rounds = 5;
  both.compression = "int8";
  both.compression_down = "f16";
  auto both_outcome = run(both);
  ASSERT_TRUE(both_outcome) << both_outcome.error().to_string();
  const auto both_rows = read_csv(both.out + "/rounds.csv");
  std::int64_t both_down = 0;
  for (const auto& b : column(both_rows, "bytes_down")) {
    both_down += std::stoll(b);
  }
  EXPECT_NEAR(static_cast<double>(int8_down - both_down), 20 * (60.0 - 25.0), 20.0)
      << both_down << " vs " << int8_down;
  EXPECT_NEAR(std::stod(column(both_rows, "accuracy").back()), plain_accuracy, 0.03);
  // 4 sites x 5 rounds = 20 updates of 31 parameters: 124 payload bytes each as float32,
  // 4 + 4 + 31 = 39 -> 40 as int8, plus 18 metadata bytes (,"encoding":"int8"): 66 fewer
  // bytes per update, whatever else the metadata holds. Each TRAIN grows by its
  // "compression" object (56 bytes); the model itself still goes down as float32.
  EXPECT_NEAR(static_cast<double>(plain_up - int8_up), 20 * 66.0, 20.0)
      << int8_up << " vs " << plain_up;
  EXPECT_NEAR(static_cast<double>(int8_down - plain_down), 20 * 56.0, 20.0);
  EXPECT_LT(topk_up, int8_up) << topk_up << " vs " << int8_up;
  EXPECT_NEAR(int8_accuracy, plain_accuracy, 0.03);
  EXPECT_GT(topk_accuracy, 0.85);
}

TEST(SimRun, BaselineOnlyWritesNoFederatedOutputs) {
  testing::TempDir dir;
  auto o = small_run(dir, "out");
  o.baseline_only = true;
  auto outcome = run(o);
  ASSERT_TRUE(outcome) << outcome.error().to_string();
  EXPECT_FALSE(std::filesystem::exists(o.out + "/rounds.csv"));
  EXPECT_TRUE(std::filesystem::exists(o.out + "/baseline.csv"));
  const auto summary = nlohmann::json::parse(slurp(o.out + "/summary.json"));
  EXPECT_FALSE(summary.contains("federated"));
  EXPECT_GT(outcome->final_accuracy, 0.8);
}

TEST(SimRun, InProcessTransportServesHundredsOfClients) {
  testing::TempDir dir;
  auto o = small_run(dir, "out");
  o.transport = Transport::inproc;
  o.clients = 200;  // about 2 training samples each
  o.rounds = 2;
  auto outcome = run(o);
  ASSERT_TRUE(outcome) << outcome.error().to_string();
  const auto rows = read_csv(o.out + "/rounds.csv");
  EXPECT_EQ(column(rows, "participants"), (std::vector<std::string>{"200", "200"}));
  // No client certificates are made for in-process sites.
  const auto issued = o.out + "/certs/clients";
  EXPECT_TRUE(!std::filesystem::exists(issued) || std::filesystem::is_empty(issued));
  auto history = store::HistoryStore::open_read_only(o.out + "/history.db");
  ASSERT_TRUE(history);
  auto clients = history->list_clients();
  ASSERT_TRUE(clients);
  EXPECT_EQ(clients->size(), 200u);
}

// More registered sites than training samples (breast-cancer has about 455): each draws its own
// 20 (sample:20), sites share samples, and each round trains the 40 it samples; the rest
// stay connected with no samples in memory (client/site_data.hpp).
TEST(SimRun, MoreSitesThanSamplesTrainOnSharedSamplesAndOnlyTheSampledOnesTrain) {
  testing::TempDir dir;
  auto o = small_run(dir, "out");
  o.transport = Transport::inproc;
  o.clients = 2'000;
  o.partition = "sample:20";
  o.clients_per_round = 40;
  o.rounds = 2;
  auto outcome = run(o);
  ASSERT_TRUE(outcome) << outcome.error().to_string();
  const auto rows = read_csv(o.out + "/rounds.csv");
  EXPECT_EQ(column(rows, "participants"), (std::vector<std::string>{"40", "40"}));
  EXPECT_GT(outcome->final_accuracy, 0.8);
  auto history = store::HistoryStore::open_read_only(o.out + "/history.db");
  ASSERT_TRUE(history);
  auto clients = history->list_clients();
  ASSERT_TRUE(clients);
  EXPECT_EQ(clients->size(), 2'000u) << "every site registered";

  o.partition = "sample:1000";  // more than the training split holds
  o.out = dir.path("too-many");
  auto refused = run(o);
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message,
              HasSubstr("--partition sample:1000 needs at least 1000 training samples; the data "
                        "has 45"));
}

TEST(SimRun, InProcessAndTlsRunsGiveTheSameNumbers) {
  testing::TempDir dir;
  auto over_tls = small_run(dir, "tls");
  auto in_process = small_run(dir, "inproc");
  in_process.transport = Transport::inproc;
  ASSERT_TRUE(run(over_tls));
  ASSERT_TRUE(run(in_process));
  EXPECT_EQ(column(read_csv(over_tls.out + "/rounds.csv"), "accuracy"),
            column(read_csv(in_process.out + "/rounds.csv"), "accuracy"));
}

// Two ranks share the sites (rank 1's connect to rank 0's server over TLS): the run is the
// same run as in one process, round for round, and rank 1 writes nothing.
TEST(SimRun, SitesSplitOverTwoRanksGiveTheSameNumbersAsOneProcess) {
  testing::TempDir dir;
  auto alone = small_run(dir, "alone");
  ASSERT_TRUE(run(alone));
  auto split = small_run(dir, "split");
  ThreadCluster::Meeting meeting;
  meeting.size = 2;
  result<SimulationOutcome> rank0 = fail(errc::internal, "not run");
  result<SimulationOutcome> rank1 = fail(errc::internal, "not run");
  std::thread second([&] {
    std::FILE* sink = std::tmpfile();
    Progress progress(OutputMode::quiet, sink, false);
    ThreadCluster cluster(meeting, 1);
    rank1 = run_simulation(split, progress, cluster);
    std::fclose(sink);
  });
  {
    std::FILE* sink = std::tmpfile();
    Progress progress(OutputMode::quiet, sink, false);
    ThreadCluster cluster(meeting, 0);
    rank0 = run_simulation(split, progress, cluster);
    std::fclose(sink);
  }
  second.join();
  ASSERT_TRUE(rank0) << rank0.error().to_string();
  ASSERT_TRUE(rank1) << rank1.error().to_string();
  EXPECT_FALSE(rank0->summary_path.empty());
  EXPECT_TRUE(rank1->summary_path.empty()) << "only rank 0 reports";
  const auto rows = read_csv(split.out + "/rounds.csv");
  EXPECT_EQ(column(rows, "participants"), (std::vector<std::string>{"4", "4", "4"}));
  EXPECT_EQ(column(rows, "accuracy"), column(read_csv(alone.out + "/rounds.csv"), "accuracy"));
}

// More ranks than sites, or several ranks without TLS, cannot work: said at once.
TEST(SimRun, ASplitThatCannotWorkIsRefused) {
  testing::TempDir dir;
  auto o = small_run(dir, "bad");
  auto data = prepare_data(o);
  ASSERT_TRUE(data) << data.error().to_string();
  ThreadCluster::Meeting meeting;
  meeting.size = 5;  // 4 sites
  ThreadCluster cluster(meeting, 0);
  auto ran = run_federation(o, *data, {}, cluster);
  ASSERT_FALSE(ran);
  EXPECT_EQ(ran.error().code, errc::invalid_argument);
  EXPECT_THAT(ran.error().message, HasSubstr("4 sites cannot be shared by 5 ranks"));
  meeting.size = 2;
  o.transport = Transport::inproc;
  ran = run_federation(o, *data, {}, cluster);
  ASSERT_FALSE(ran);
  EXPECT_THAT(ran.error().message, HasSubstr("--transport tls"));
}

// A port nobody listens on right now (the kernel's choice; it could be taken again before
// the dashboard binds it, which would fail the test loudly rather than wrongly).
std::uint16_t unused_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor probe(
      io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  return probe.local_endpoint().port();
}

// --dashboard-port serves the real admin API for this run: the line it prints carries
// the URL, a token that works (and is needed) and the CA that signed the certificate.
// The requests run inside the note callback, while the federation is being set up.
TEST(SimRun, DashboardPortServesTheAdminApiWithThePrintedToken) {
  testing::TempDir dir;
  auto o = small_run(dir, "out");
  o.rounds = 1;
  o.transport = Transport::inproc;
  o.dashboard_port = unused_port();
  o.dashboard_linger_s = 0;
  o.web_root = fedcore::source_path("web");
  auto data = prepare_data(o);
  ASSERT_TRUE(data) << data.error().to_string();

  std::string line;
  api::testing::Reply info, anonymous, page;
  RunCallbacks callbacks;
  callbacks.note = [&](const std::string& note) {
    static const std::regex dashboard(
        R"(^dashboard: https://localhost:(\d+)/  \(token (\S+); the certificate is signed by (\S+)\)$)");
    std::smatch m;
    if (!std::regex_match(note, m, dashboard)) {
      return;
    }
    line = note;
    const auto port = static_cast<std::uint16_t>(std::stoi(m[1].str()));
    api::testing::HttpsClient client(port, m[3].str(), m[2].str());
    info = client.get("/api/v1/info");
    anonymous = client.get("/api/v1/clients", {{"Authorization", ""}});
    page = client.get("/");
  };
  auto single = single_process_cluster();
  auto ran = run_federation(o, *data, callbacks, *single);
  ASSERT_TRUE(ran) << ran.error().to_string();
  ASSERT_FALSE(line.empty()) << "no dashboard line was printed";
  EXPECT_THAT(line, HasSubstr(":" + std::to_string(o.dashboard_port) + "/"));
  EXPECT_EQ(info.status, 200) << info.describe();
  EXPECT_EQ(info.json()["listeners"]["federation"], "in-process") << info.describe();
  EXPECT_EQ(anonymous.status, 401) << anonymous.describe();
  EXPECT_EQ(page.status, 200) << page.describe();
  EXPECT_THAT(page.body, HasSubstr("<html"));
  EXPECT_EQ(ran->rounds.size(), 1u);
}

TEST(SimRun, TooManyClientsForTheDataIsAClearError) {
  testing::TempDir dir;
  auto o = small_run(dir, "out");
  o.clients = 1000;
  auto outcome = run(o);
  ASSERT_FALSE(outcome);
  EXPECT_EQ(outcome.error().code, errc::invalid_argument);
  EXPECT_THAT(outcome.error().message, HasSubstr("1000 clients need at least 1000"));
}

}  // namespace
}  // namespace fedcore::sim
