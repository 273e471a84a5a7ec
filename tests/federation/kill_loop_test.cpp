// Issue 19, "Faults on the wire": the kill -9 loop. One run of the real fedcore-server
// (logistic regression on the breast-cancer CSV, two sites) is killed with SIGKILL at N
// moments and restarted after each; the two client daemons (in this process) reconnect by
// themselves. N is FEDCORE_KILL_POINTS (default 8; .ci/run-long uses 50). The moments are
// drawn from a seeded RNG: the seed is printed, and FEDCORE_KILL_SEED=<seed> replays the
// plan (each kill's kind, delay, point and pass); where a timed kill lands still depends
// on the machine's timing, which the traces report.
//
// The moments. Each kill is one of:
//   start-up  a random delay after the process was started (up to the reference run's time
//             to its first commit plus two rounds, at most 300 ms): process start,
//             opening the history, the orphan sweep, resuming, waiting for the sites;
//   mid-run   once this process has committed a round, a random delay of up to two
//             rounds (microsecond resolution), wherever that falls;
//   at-point  the server stops itself the 1st, 2nd or 3rd time it passes a named point
//             of the commit path (shared/util/test_point.hpp, FEDCORE_TEST_PAUSE_AT) and
//             is killed there: before its checkpoint is written, with the checkpoint's
//             .tmp durable but not renamed, with the checkpoint durable but not yet in the
//             store, inside the round's transaction (just opened, or every row written and
//             COMMIT not run), or just after COMMIT.
// Every process traces the points it passes (FEDCORE_TEST_TRACE), so the trace's last line
// says in which phase its kill landed, whatever the kind. The plan always holds at least
// one at-point kill inside the checkpoint write and one inside the round commit; the test
// asserts that the traces saw kills land in both phases.
//
// Checkpoint retention: the killed run keeps only its newest 2 rounds' files
// (keep_checkpoints) when the seed is odd, every file when it is even
// (FEDCORE_KILL_KEEP_CHECKPOINTS=N overrides), so kills also land between a commit that
// retired a file and the file's deletion; the reference run keeps every file.
//
// After every kill, and at the end: every committed round is in the history once, in
// order, with an intact checkpoint whose CRC is the store's; nothing else is referenced;
// PRAGMA integrity_check is ok (tests/federation/history_checks.hpp); the last round never
// went back. At the end also: the run finished all its rounds, and no checkpoint file is
// left that the store does not reference.
//
// The final model. Local training is seeded with the run's seed plus the round, the data
// split and the client selection are seeded, the feature scale is combined in client-id
// order, and FedAvg's sum is exact fixed point (server/federation/fixed_point_mean.hpp), so
// the order the two sites' updates arrive in does not matter. (Before the sum was exact,
// the float running mean made a-then-b and b-then-a differ in the last bits, and this test
// had to hold site-2's update until the server had answered site-1's.) Nothing orders the
// updates now: every round's checkpoint of the interrupted run must have the size and
// CRC-32 of the uninterrupted run's, and the final models must be equal bit for bit.
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "shared/model/param_io.hpp"
#include "shared/util/rng.hpp"
#include "tests/federation/federation_fixture.hpp"
#include "tests/federation/history_checks.hpp"
#include "tests/federation/server_process.hpp"

namespace fedcore {
namespace {

using testing::DaemonThreads;
using testing::ServerProcess;
using testing::TempDir;
using namespace std::chrono_literals;

// ---------------------------------------------------------------- settings

// The environment variable `name` as an integer in [low, high], or `fallback` when it is
// unset or empty; nullopt when it is set to anything else.
std::optional<int> env_integer(const char* name, int fallback, int low, int high) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == 0) {
    return fallback;
  }
  int n = 0;
  const auto* end = text + std::strlen(text);
  const auto [last, ec] = std::from_chars(text, end, n);
  if (ec != std::errc() || last != end || n < low || n > high) {
    return std::nullopt;
  }
  return n;
}

// FEDCORE_KILL_POINTS, or `fallback`; nullopt when set but not an integer in [2, 1000].
std::optional<int> kill_points(int fallback) {
  return env_integer("FEDCORE_KILL_POINTS", fallback, 2, 1000);
}

// FEDCORE_KILL_SEED to replay a run, else a fresh seed (printed by the test).
std::optional<std::uint64_t> kill_seed() {
  const char* text = std::getenv("FEDCORE_KILL_SEED");
  if (text == nullptr || *text == 0) {
    std::random_device device;
    return (std::uint64_t{device()} << 32) ^ device();
  }
  std::uint64_t seed = 0;
  const auto* end = text + std::strlen(text);
  const auto [last, ec] = std::from_chars(text, end, seed);
  if (ec != std::errc() || last != end) {
    return std::nullopt;
  }
  return seed;
}

// FEDCORE_KILL_KEEP_CHECKPOINTS, else 2 for an odd seed and 0 (keep all) for an even one;
// nullopt when set but not an integer in [0, 1000].
std::optional<int> keep_checkpoints(std::uint64_t seed) {
  return env_integer("FEDCORE_KILL_KEEP_CHECKPOINTS", seed % 2 == 1 ? 2 : 0, 0, 1000);
}

// ---------------------------------------------------------------- phases and the plan

// Where a kill landed, from the last test point the process passed.
enum class Phase { start_up, in_round, checkpoint_write, round_commit, after_commit };
constexpr std::array<const char*, 5> kPhaseNames = {
    "start-up", "in a round (training, collecting, evaluating)", "checkpoint write", "round commit",
    "just after a commit"};

Phase phase_after(std::string_view point) {
  if (point.empty()) {
    return Phase::start_up;  // no round begun by this process yet
  }
  if (point == "round.begin") {
    return Phase::in_round;
  }
  if (point == "checkpoint.begin" || point == "atomic_write.temp_synced") {
    return Phase::checkpoint_write;
  }
  if (point == "checkpoint.end" || point == "round_commit.begin" ||
      point == "round_commit.before_commit") {
    return Phase::round_commit;  // the checkpoint is durable, the round not yet committed
  }
  if (point == "round_commit.end") {
    return Phase::after_commit;
  }
  ADD_FAILURE() << "unknown test point '" << point << "' in a trace";
  return Phase::in_round;
}

// The point a kill landed at: the one the process is paused at, if any; else the last
// point in the trace file; empty when the process passed none. A paused point wins over a
// later line: with overlap_checkpoints the checkpoint is written on a worker thread, and
// while the worker waits at checkpoint.begin the controller's thread has already passed
// the next round's round.begin.
std::string last_point(const std::string& trace) {
  std::ifstream in(trace);
  std::string line;
  std::string last;
  std::string paused;
  while (std::getline(in, line)) {
    if (line.starts_with("paused ")) {
      paused = line.substr(7);
    } else if (!line.empty()) {
      last = line;
    }
  }
  const auto& point = paused.empty() ? last : paused;
  return point.substr(0, point.find(' '));
}

bool trace_paused(const std::string& trace) {
  std::ifstream in(trace);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("paused ")) {
      return true;
    }
  }
  return false;
}

struct Kill {
  enum class Kind { start_up, mid_run, at_point };
  Kind kind = Kind::start_up;
  std::chrono::microseconds delay{0};  // start_up and mid_run
  std::string point;                   // at_point: the test point, and which pass of it
  int occurrence = 0;

  std::string describe() const {
    switch (kind) {
      case Kind::start_up:
        return "start-up + " + std::to_string(delay.count()) + " us";
      case Kind::mid_run:
        return "first commit + " + std::to_string(delay.count()) + " us";
      case Kind::at_point:
        return "paused at " + point + " #" + std::to_string(occurrence);
    }
    return "?";
  }
};

constexpr std::array<const char*, 2> kCheckpointPoints = {"checkpoint.begin",
                                                          "atomic_write.temp_synced"};
constexpr std::array<const char*, 3> kCommitPoints = {"checkpoint.end", "round_commit.begin",
                                                      "round_commit.before_commit"};

bool pauses_in(const Kill& k, Phase phase) {
  return k.kind == Kill::Kind::at_point && phase_after(k.point) == phase;
}

// N kills: 2 in 10 at start-up, 4 in 10 mid-run, 4 in 10 at a point (one of the six named
// ones, pass 1 to 3). If the draw holds no at-point kill inside the checkpoint write, one
// kill (chosen by the RNG) becomes one; then likewise for the round commit, never
// replacing the only checkpoint-write kill.
std::vector<Kill> plan_kills(Rng& rng, int n, std::chrono::microseconds round_time,
                             std::chrono::microseconds start_up_time) {
  // A start-up kill lands before the process's first commit or in its first rounds:
  // never later than that (plus two rounds), or on a fast machine the restarted server
  // could finish the whole run before it is killed.
  const auto start_up_window = std::min<std::int64_t>(
      300'000, std::max<std::int64_t>(start_up_time.count() + 2 * round_time.count(), 1));
  static constexpr std::array<const char*, 6> kAllPoints = {
      kCheckpointPoints[0], kCheckpointPoints[1], kCommitPoints[0],
      kCommitPoints[1],     kCommitPoints[2],     "round_commit.end"};
  std::vector<Kill> plan(static_cast<std::size_t>(n));
  const auto pass = [&] { return 1 + static_cast<int>(rng.below(3)); };
  for (auto& k : plan) {
    const auto draw = rng.below(10);
    if (draw < 2) {
      k.kind = Kill::Kind::start_up;
      k.delay = std::chrono::microseconds(rng.below(static_cast<std::uint64_t>(start_up_window)));
    } else if (draw < 6) {
      k.kind = Kill::Kind::mid_run;
      k.delay = std::chrono::microseconds(
          rng.below(static_cast<std::uint64_t>(std::max<std::int64_t>(2 * round_time.count(), 1))));
    } else {
      k.kind = Kill::Kind::at_point;
      k.point = kAllPoints[rng.below(kAllPoints.size())];
      k.occurrence = pass();
    }
  }
  const auto any = [&](Phase phase) {
    return std::any_of(plan.begin(), plan.end(),
                       [&](const Kill& k) { return pauses_in(k, phase); });
  };
  if (!any(Phase::checkpoint_write)) {
    auto& k = plan[rng.below(plan.size())];
    k = Kill{Kill::Kind::at_point, 0us, kCheckpointPoints[rng.below(2)], pass()};
  }
  if (!any(Phase::round_commit)) {
    std::vector<std::size_t> candidates;
    for (std::size_t i = 0; i < plan.size(); ++i) {
      if (!pauses_in(plan[i], Phase::checkpoint_write)) {
        candidates.push_back(i);
      }
    }
    if (candidates.empty()) {
      candidates.push_back(1);  // n >= 2 checkpoint-write kills: replacing one leaves one
    }
    auto& k = plan[candidates[rng.below(candidates.size())]];
    k = Kill{Kill::Kind::at_point, 0us, kCommitPoints[rng.below(3)], pass()};
  }
  return plan;
}

// ---------------------------------------------------------------- one federation

// A run's files and its two sites.
class TwoSiteRun {
 public:
  TwoSiteRun(const TempDir& dir, const std::string& name, const tls::testing::Pki& pki,
             std::int64_t rounds, int keep_checkpoints = 0)
      : root_(dir.path(name)), pki_(pki), port_(testing::free_port()) {
    std::filesystem::create_directories(root_);
    testing::write_server_config(path("server.json"), port_, db(), checkpoints(), pki,
                                 keep_checkpoints);
    std::ofstream run(path("run.json"));
    run << R"({"name":"kill-loop","model":{"type":"logreg"},"rounds":)" << rounds
        << R"(,"clients_per_round":2,"min_clients":2,"local_epochs":1,"batch_size":16,)"
        << R"("optimizer":{"kind":"sgd","lr":0.1},"round_timeout_s":30,)"
        << R"("wait_for_clients_s":30,"seed":11})";
  }

  std::string path(const std::string& name) const { return (root_ / name).string(); }
  std::string db() const { return path("server.db"); }
  std::string checkpoints() const { return path("ckpt"); }
  std::string log() const { return path("server.log"); }

  // The arguments of a server start: with --run only while the history has no run yet
  // (the first start, or a restart after a kill that came before the run was created).
  std::vector<std::string> server_args() const {
    std::vector<std::string> args{"--config", path("server.json"), "--api-port", "0"};
    auto store = store::HistoryStore::open_read_only(db());
    if (!store || !store->get_run(1)) {
      args.insert(args.end(), {"--run", path("run.json")});
    }
    return args;
  }

  void start_sites() {
    for (std::size_t i = 0; i < 2; ++i) {
      auto options =
          testing::breast_cancer_site(pki_, "site-" + std::to_string(i + 1), port_, i, 2);
      options.initial_backoff = 20ms;
      options.max_backoff = 200ms;
      sites_.start(options);
    }
  }
  void stop_sites() { sites_.stop(); }

 private:
  std::filesystem::path root_;
  const tls::testing::Pki& pki_;
  std::uint16_t port_;
  DaemonThreads sites_;
};

bool run_exists(const std::string& db) {
  auto store = store::HistoryStore::open_read_only(db);
  return store && store->get_run(1);
}

// Polls a trace until the server says it paused there, or the timeout.
bool wait_for_pause(const std::string& trace, ServerProcess& server,
                    std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline && server.running()) {
    if (trace_paused(trace)) {
      return true;
    }
    std::this_thread::sleep_for(2ms);  // polling the trace file
  }
  return false;
}

std::set<std::string> files_under(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_regular_file()) {
      out.insert(it->path().string());
    }
  }
  return out;
}

std::chrono::duration<double> since(std::chrono::steady_clock::time_point start) {
  return std::chrono::steady_clock::now() - start;
}

// ---------------------------------------------------------------- the test

TEST(KillLoop, ServerKilledAtRandomMomentsKeepsItsHistoryAndItsModel) {
  const auto n = kill_points(8);
  ASSERT_TRUE(n) << "FEDCORE_KILL_POINTS must be an integer from 2 to 1000";
  const auto seed = kill_seed();
  ASSERT_TRUE(seed) << "FEDCORE_KILL_SEED must be an unsigned integer";
  const auto keep = keep_checkpoints(*seed);
  ASSERT_TRUE(keep) << "FEDCORE_KILL_KEEP_CHECKPOINTS must be an integer in [0, 1000]";
  std::cout << "kill loop: " << *n << " kills, FEDCORE_KILL_SEED=" << *seed << "\n";
  SCOPED_TRACE("replay with FEDCORE_KILL_POINTS=" + std::to_string(*n) +
               " FEDCORE_KILL_SEED=" + std::to_string(*seed));
  // Each kill costs the run at most a few rounds (an at-point kill waits for at most its
  // 3rd pass; a mid-run kill, the watcher's lag of about a millisecond plus up to two
  // rounds, several rounds when a round takes a fraction of a millisecond): with six per
  // kill and ten more the run is still going at the last kill, which the loop checks.
  const std::int64_t rounds = 6 * *n + 10;

  TempDir dir;
  testing::Federation pki_only(dir);  // only for its PKI helper
  pki_only.add_client_certificate("site-1");
  pki_only.add_client_certificate("site-2");
  const auto& pki = pki_only.pki();

  // 1. The uninterrupted run: the reference model, and how long a round takes here.
  TwoSiteRun reference(dir, "reference", pki, rounds);
  const auto reference_start = std::chrono::steady_clock::now();
  std::int64_t reference_high = 0;
  std::chrono::microseconds start_up_time{0};  // process start to the first commit
  {
    ServerProcess server(reference.server_args(), reference.log());
    reference.start_sites();
    const auto first = testing::watch_rounds(
        reference.db(), reference_high, [&](std::int64_t r) { return r >= 1; }, 300s);
    ASSERT_GE(first, 1) << "the uninterrupted run committed no round";
    start_up_time = std::chrono::duration_cast<std::chrono::microseconds>(since(reference_start));
    const auto last = testing::watch_rounds(
        reference.db(), reference_high, [&](std::int64_t r) { return r >= rounds; }, 300s);
    ASSERT_EQ(last, rounds) << "the uninterrupted run did not finish";
    EXPECT_EQ(server.terminate(15s), 0);
    reference.stop_sites();
  }
  // A round's time once running: the start-up is not spread over the rounds (with rounds
  // of half a millisecond it would be most of the average, and mid-run kills would wait
  // many rounds instead of up to two).
  const auto reference_seconds = since(reference_start).count();
  const double running_us =
      std::max(1.0, reference_seconds * 1e6 - static_cast<double>(start_up_time.count()));
  const auto round_time = std::chrono::microseconds(std::max<std::int64_t>(
      1, static_cast<std::int64_t>(running_us / static_cast<double>(rounds - 1))));
  const auto expected = testing::expect_intact_history(reference.db());
  ASSERT_EQ(expected.checkpoints.size(), static_cast<std::size_t>(rounds));

  // 2. The same run, killed N times.
  Rng rng(*seed);
  const auto plan = plan_kills(rng, *n, round_time, start_up_time);
  TwoSiteRun killed(dir, "killed", pki, rounds, *keep);
  killed.start_sites();
  std::array<int, kPhaseNames.size()> landed{};
  std::int64_t high_water = 0;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const auto& kill = plan[i];
    SCOPED_TRACE("kill " + std::to_string(i + 1) + ": " + kill.describe());
    const auto trace = killed.path("trace-" + std::to_string(i + 1) + ".txt");
    std::vector<std::string> env{"FEDCORE_TEST_TRACE=" + trace};
    if (kill.kind == Kill::Kind::at_point) {
      env.push_back("FEDCORE_TEST_PAUSE_AT=" + kill.point + ":" + std::to_string(kill.occurrence));
    }
    const auto left = high_water;  // what the previous processes committed
    ServerProcess server(killed.server_args(), killed.log(), env);
    switch (kill.kind) {
      case Kill::Kind::start_up:
        // The delay is the drawn moment itself, not a wait for something to happen.
        std::this_thread::sleep_for(kill.delay);
        break;
      case Kill::Kind::mid_run: {
        const auto seen = testing::watch_rounds(
            killed.db(), high_water, [&](std::int64_t r) { return r > left; }, 60s);
        ASSERT_GT(seen, left) << "the restarted server committed no round within 60 s";
        std::this_thread::sleep_for(kill.delay);  // the drawn moment
        break;
      }
      case Kill::Kind::at_point:
        ASSERT_TRUE(wait_for_pause(trace, server, 60s))
            << "the server did not reach " << kill.point << " #" << kill.occurrence;
        break;
    }
    ASSERT_TRUE(server.running()) << "the server exited by itself (wait status "
                                  << server.exit_status() << "); see " << killed.log();
    server.kill_now();
    const auto point = last_point(trace);
    const auto phase = phase_after(point);
    ++landed[static_cast<std::size_t>(phase)];

    // What the kill left must be whole, and never behind what was committed before.
    std::int64_t last = 0;
    if (run_exists(killed.db())) {
      const auto history = testing::expect_intact_history(killed.db());
      last = history.last_round;
      EXPECT_GE(last, high_water) << "round numbers went back";
      ASSERT_EQ(history.state, store::RunState::running);
      ASSERT_LT(last, rounds) << "the run ended before the last kill: give it more rounds";
    }
    high_water = std::max(high_water, last);
    std::cout << "kill " << i + 1 << "/" << plan.size() << ": " << kill.describe()
              << " -> landed in " << kPhaseNames[static_cast<std::size_t>(phase)]
              << (point.empty() ? "" : " (after " + point + ")") << ", last round " << last << "\n";
    ASSERT_FALSE(HasFailure()) << "stopping at the first kill that broke something";
  }

  // 3. A last start, left to finish the run.
  {
    ServerProcess server(killed.server_args(), killed.log());
    const auto last = testing::watch_rounds(
        killed.db(), high_water, [&](std::int64_t r) { return r >= rounds; }, 300s);
    ASSERT_EQ(last, rounds) << "the run did not finish after the kills";
    EXPECT_EQ(server.terminate(15s), 0);
    killed.stop_sites();
  }
  const auto seconds = since(start).count();

  const auto history = testing::expect_intact_history(killed.db());
  EXPECT_EQ(history.state, store::RunState::finished);
  EXPECT_EQ(history.last_round, rounds);
  ASSERT_EQ(history.checkpoints.size(), expected.checkpoints.size());
  // No orphan: the start after the last kill swept what that kill left, and a clean run
  // leaves nothing but the checkpoints it committed.
  std::set<std::string> referenced;
  for (const auto& c : history.checkpoints) {
    if (!c.removed_ms) {
      referenced.insert(c.ref.path);
    }
  }
  EXPECT_EQ(files_under(killed.checkpoints()), referenced);
  // Retention kept exactly the newest `keep` files (all of them with 0).
  EXPECT_EQ(referenced.size(),
            static_cast<std::size_t>(*keep == 0 ? rounds : std::min<std::int64_t>(*keep, rounds)));

  // The model, round by round: the same bytes as the uninterrupted run's.
  for (std::size_t r = 0; r < history.checkpoints.size(); ++r) {
    const auto& got = history.checkpoints[r].ref;
    const auto& want = expected.checkpoints[r].ref;
    ASSERT_TRUE(got.crc32 == want.crc32 && got.size_bytes == want.size_bytes)
        << "round " << r + 1 << "'s checkpoint differs from the uninterrupted run's";
  }
  auto final_model = model::load_params(history.checkpoints.back().ref.path);
  auto reference_model = model::load_params(expected.checkpoints.back().ref.path);
  ASSERT_TRUE(final_model && reference_model);
  ASSERT_EQ(final_model->params.size(), reference_model->params.size());
  EXPECT_EQ(std::memcmp(final_model->params.data(), reference_model->params.data(),
                        final_model->params.size() * sizeof(float)),
            0)
      << "the final model is not bit for bit the uninterrupted run's";

  // The kills really landed inside the checkpoint write and the round commit.
  EXPECT_GE(landed[static_cast<std::size_t>(Phase::checkpoint_write)], 1);
  EXPECT_GE(landed[static_cast<std::size_t>(Phase::round_commit)], 1);

  std::ostringstream summary;
  summary << "kill loop: " << plan.size() << " kills and restarts, seed " << *seed
          << ", keep_checkpoints " << *keep << "; landed:";
  for (std::size_t p = 0; p < kPhaseNames.size(); ++p) {
    summary << (p == 0 ? " " : ", ") << kPhaseNames[p] << " " << landed[p];
  }
  summary << "; " << rounds << " rounds committed in " << seconds
          << " s (uninterrupted: " << reference_seconds << " s)\n";
  std::cout << summary.str();
  RecordProperty("kills", static_cast<int>(plan.size()));
  RecordProperty("seed", std::to_string(*seed));
  RecordProperty("rounds", static_cast<int>(rounds));
  RecordProperty("wall_seconds", std::to_string(seconds));
  for (std::size_t p = 0; p < kPhaseNames.size(); ++p) {
    RecordProperty(std::string("landed_") + std::to_string(p), landed[p]);
  }
}

}  // namespace
}  // namespace fedcore
