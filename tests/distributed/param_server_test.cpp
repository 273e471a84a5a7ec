// Parameter-server ASGD with ranks as threads: it learns, the server's accounting is
// exact (updates, staleness, discards), a scripted run with known staleness gives known
// parameters, a dead or silent worker fails the server within the deadline, and one rank
// is refused.
#include "distributed/param_server.hpp"

#include <condition_variable>
#include <mutex>
#include <numeric>
#include <thread>

#include <gtest/gtest.h>

#include "distributed/train_support.hpp"
#include "shared/collective/collectives.hpp"
#include "shared/collective/inproc_transport.hpp"
#include "tests/distributed/distributed_test_support.hpp"

namespace fedcore::distributed {
namespace {

using namespace std::chrono_literals;
using test_support::run_ranks;
using test_support::small_options;
using test_support::synthetic;
using SteadyClock = std::chrono::steady_clock;

TrainOptions ps_options() {
  auto o = small_options();
  o.async = AsyncMode::parameter_server;
  return o;
}

void expect_consistent_stats(const PsStats& ps, std::size_t updates) {
  EXPECT_EQ(ps.updates, updates);
  EXPECT_EQ(ps.received, ps.updates + ps.discarded + ps.unused_at_stop);
  // At the end, every worker but the one whose gradient was the last update still owed one.
  EXPECT_LE(ps.unused_at_stop, static_cast<std::size_t>(ps.workers - 1));
  ASSERT_EQ(ps.staleness_histogram.size(), ps.max_staleness + 1);
  EXPECT_GT(ps.staleness_histogram.back(), 0u);
  EXPECT_EQ(
      std::accumulate(ps.staleness_histogram.begin(), ps.staleness_histogram.end(), std::size_t{0}),
      ps.updates);
  double weighted = 0;
  for (std::size_t s = 0; s < ps.staleness_histogram.size(); ++s)
    weighted += static_cast<double>(s * ps.staleness_histogram[s]);
  EXPECT_NEAR(ps.mean_staleness, weighted / static_cast<double>(ps.updates), 1e-12);
}

// Logistic regression on a harder version of the synthetic set (signal 0.2): convex, so
// the final accuracy barely depends on the order of updates (0.91 +- 0.01 over 40 runs),
// unlike the small cnn, whose last iterate varies from 0.6 to 1.0 from run to run.
TEST(ParameterServer, ThreeRanksLearnAndTheServerAppliesExactlyTheBudget) {
  const auto data = synthetic(960, 512, 0.2f);
  auto options = ps_options();
  auto spec = model::parse_model_spec(std::string_view(R"({"type":"logreg"})"));
  ASSERT_TRUE(spec);
  options.spec = *model::complete_spec(*spec, {8, 8, 1}, 4);
  options.epochs = 8;
  options.batch_size = 16;
  options.optimizer.learning_rate = 0.05f;
  const auto results = run_ranks(3, data, options);
  const auto& server = results[0];
  // 960 samples, 2 workers x batch 16: 30 global batches, 60 updates per epoch, 8 epochs.
  EXPECT_EQ(server.steps, 480u);
  expect_consistent_stats(server.ps, 480);
  EXPECT_EQ(server.ps.workers, 2);
  EXPECT_EQ(server.ps.discarded, 0u);  // no staleness limit
  // Every rank ends with the server's final parameters.
  for (const auto& r : results) {
    EXPECT_EQ(r.params, server.params);
  }
  EXPECT_EQ(server.ranks[1].param_crc32, server.ranks[0].param_crc32);
  // Workers trained every received gradient's batch; the server trained none.
  EXPECT_EQ(server.ranks[0].samples, 0.0);
  EXPECT_DOUBLE_EQ(server.samples, static_cast<double>(server.ps.received * 16));
  EXPECT_GT(server.samples_per_second, 0.0);
  EXPECT_GT(server.final_train_loss, 0.0);

  // One synchronous worker on the same samples reaches 0.91; ten updates reach 0.28, and
  // chance is 0.25. PS-ASGD must learn as well as synchronous SGD, give or take.
  auto sync = options;
  sync.async = AsyncMode::none;
  const double single = run_ranks(1, data, sync)[0].test_accuracy;
  EXPECT_GT(single, 0.85);
  EXPECT_GT(server.test_accuracy, 0.85);
  EXPECT_GT(server.test_accuracy, single - 0.04);
}

TEST(ParameterServer, MaxStalenessIsRespectedAndTheBudgetStillMet) {
  const auto data = synthetic(240);
  auto options = ps_options();
  options.evaluate = false;
  options.max_staleness = 0;  // only fresh gradients; with 3 workers many are stale
  options.staleness_lr = StalenessLr::inverse;
  const auto results = run_ranks(4, data, options);
  const auto& ps = results[0].ps;
  EXPECT_EQ(ps.workers, 3);
  expect_consistent_stats(ps, results[0].steps);
  EXPECT_EQ(ps.max_staleness, 0u);
  EXPECT_EQ(ps.staleness_histogram.size(), 1u);
  for (const auto& r : results)
    EXPECT_EQ(r.params, results[0].params);
}

// A turnstile for scripting several threads: wait until the turn is n, pass to n + 1.
class Turns {
 public:
  bool wait(int n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 20s, [&] { return turn_ >= n; });
  }
  void pass(int n) {
    std::lock_guard lock(mutex_);
    turn_ = n;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int turn_ = 0;
};

// A worker driven by the test, speaking the documented wire protocol.
struct ScriptedWorker {
  collective::Communicator& comm;
  std::vector<float> params;
  std::vector<float> ones;

  PsHeader receive() {
    PsHeader h;
    EXPECT_TRUE(
        collective::recv(comm, {.peer = 0,
                                .tag = kPsHeaderTag,
                                .data = std::as_writable_bytes(std::span<PsHeader>(&h, 1))}));
    EXPECT_TRUE(collective::recv(
        comm, {.peer = 0, .tag = kPsTensorTag, .data = std::as_writable_bytes(std::span(params))}));
    return h;
  }
  void send_gradient(std::uint64_t version) {
    const PsHeader h{.command = PsCommand::gradient, .version = version, .loss = 1.0, .samples = 8};
    EXPECT_TRUE(collective::send(
        comm, {.peer = 0, .tag = kPsHeaderTag, .data = std::as_bytes(std::span(&h, 1))}));
    EXPECT_TRUE(collective::send(
        comm, {.peer = 0, .tag = kPsTensorTag, .data = std::as_bytes(std::span(ones))}));
  }
  void finish() {
    TrainResult ignored;
    RankStats mine;
    mine.rank = comm.rank();
    EXPECT_TRUE(gather_rank_stats(comm, mine, ignored));
  }
};

// Two scripted workers send all-ones gradients in a known order (plain SGD, lr 0.1,
// max staleness 1, lr / (staleness + 1)):
//   w1: g(v0) applied s=0 -> v1; g(v1) applied s=0 -> v2
//   w2: g(v0) at v2: s=2 > 1, discarded
//   w1: g(v2) applied s=0 -> v3
//   w2: g(v2) at v3: s=1, applied with lr 0.05 -> v4 = the budget
//   w1: g(v3) owed at the end: unused; then both get stop with the final parameters.
TEST(ParameterServer, ScriptedStalenessIsDiscardedOrDampedExactly) {
  const auto data = synthetic(160);
  auto options = ps_options();
  options.evaluate = false;
  options.max_steps = 4;
  options.max_staleness = 1;
  options.staleness_lr = StalenessLr::inverse;
  auto built = model::build_model(options.spec);
  ASSERT_TRUE(built);
  built->initialize(options.seed);
  const std::vector<float> initial(built->params().begin(), built->params().end());
  const std::size_t n = initial.size();

  collective::InProcessGroup group(3);
  Turns turns;
  result<TrainResult> server = fail(errc::internal, "not run");
  std::vector<float> final1, final2;
  std::thread server_thread([&] {
    collective::Communicator comm(group.transport(0), "ps-test", 20s);
    server = train_data_parallel(comm, data, options);
  });
  std::thread w1([&] {
    collective::Communicator comm(group.transport(1), "ps-test", 20s);
    ScriptedWorker w{comm, std::vector<float>(n), std::vector<float>(n, 1.0f)};
    EXPECT_EQ(w.receive().version, 0u);
    EXPECT_EQ(w.params, initial);
    w.send_gradient(0);
    EXPECT_EQ(w.receive().version, 1u);
    w.send_gradient(1);
    EXPECT_EQ(w.receive().version, 2u);
    turns.pass(1);
    ASSERT_TRUE(turns.wait(2));
    w.send_gradient(2);
    EXPECT_EQ(w.receive().version, 3u);
    turns.pass(3);
    ASSERT_TRUE(turns.wait(4));
    w.send_gradient(3);
    const auto stop = w.receive();
    EXPECT_EQ(stop.command, PsCommand::stop);
    EXPECT_EQ(stop.version, 4u);
    final1 = w.params;
    w.finish();
  });
  std::thread w2([&] {
    collective::Communicator comm(group.transport(2), "ps-test", 20s);
    ScriptedWorker w{comm, std::vector<float>(n), std::vector<float>(n, 1.0f)};
    EXPECT_EQ(w.receive().version, 0u);
    ASSERT_TRUE(turns.wait(1));
    w.send_gradient(0);
    EXPECT_EQ(w.receive().version, 2u);  // discarded: fresh parameters at once
    turns.pass(2);
    ASSERT_TRUE(turns.wait(3));
    w.send_gradient(2);
    turns.pass(4);
    const auto stop = w.receive();
    EXPECT_EQ(stop.command, PsCommand::stop);
    final2 = w.params;
    w.finish();
  });
  server_thread.join();
  w1.join();
  w2.join();
  ASSERT_TRUE(server) << server.error().to_string();
  const auto& ps = server->ps;
  EXPECT_EQ(ps.updates, 4u);
  EXPECT_EQ(ps.discarded, 1u);
  EXPECT_EQ(ps.unused_at_stop, 1u);
  EXPECT_EQ(ps.received, 6u);
  EXPECT_EQ(ps.max_staleness, 1u);
  EXPECT_EQ(ps.staleness_histogram, (std::vector<std::size_t>{3, 1}));
  EXPECT_DOUBLE_EQ(ps.mean_staleness, 0.25);
  std::vector<float> expected = initial;
  for (float& p : expected) {
    p -= 0.1f;
    p -= 0.1f;
    p -= 0.1f;
    p -= 0.1f / 2.0f;
  }
  EXPECT_EQ(server->params, expected);
  EXPECT_EQ(final1, expected);
  EXPECT_EQ(final2, expected);
}

// Rank 2 takes its first parameters and then dies (its transport goes away) or falls
// silent; rank 1 is a real worker. The server must fail, not hang.
enum class Fault { dies, silent };

struct FaultRun {
  result<TrainResult> server = fail(errc::internal, "not run");
  result<TrainResult> worker = fail(errc::internal, "not run");
  SteadyClock::duration server_took{};
};

FaultRun run_with_faulty_worker(Fault fault, std::chrono::milliseconds op_timeout) {
  const auto data = synthetic(480);
  auto options = ps_options();
  options.epochs = 1000000;  // far more than the test lets it run
  options.evaluate = false;
  collective::InProcessGroup group(3);
  FaultRun run;
  std::mutex mutex;
  std::condition_variable server_done;
  bool done = false;
  const std::size_t n = [&] {
    auto m = model::build_model(options.spec);
    return m->param_count();
  }();
  std::thread server_thread([&] {
    collective::Communicator comm(group.transport(0), "ps-fault", op_timeout);
    const auto begin = SteadyClock::now();
    run.server = train_data_parallel(comm, data, options);
    run.server_took = SteadyClock::now() - begin;
    std::lock_guard lock(mutex);
    done = true;
    server_done.notify_all();
  });
  std::thread worker_thread([&] {
    collective::Communicator comm(group.transport(1), "ps-fault", op_timeout);
    run.worker = train_data_parallel(comm, data, options);
  });
  std::thread faulty([&] {
    auto comm =
        std::make_unique<collective::Communicator>(group.transport(2), "ps-fault", op_timeout);
    ScriptedWorker w{*comm, std::vector<float>(n), std::vector<float>(n, 1.0f)};
    (void)w.receive();
    if (fault == Fault::silent) {
      // Stay alive without answering until the server has given up (bounded wait).
      std::unique_lock lock(mutex);
      server_done.wait_for(lock, 60s, [&] { return done; });
    }
    comm.reset();  // the transport goes away: the rank is dead
  });
  server_thread.join();
  worker_thread.join();
  faulty.join();
  return run;
}

TEST(ParameterServer, DeadWorkerFailsTheServerLongBeforeTheDeadline) {
  const auto run = run_with_faulty_worker(Fault::dies, 20000ms);
  ASSERT_FALSE(run.server);
  EXPECT_EQ(run.server.error().code, errc::unavailable) << run.server.error().to_string();
  EXPECT_NE(run.server.error().message.find("rank 2"), std::string::npos)
      << run.server.error().message;
  EXPECT_LT(run.server_took, 10s);
  // The healthy worker is told too (the server aborted the group), not left waiting.
  ASSERT_FALSE(run.worker);
}

TEST(ParameterServer, SilentWorkerFailsTheServerAtTheDeadline) {
  const auto run = run_with_faulty_worker(Fault::silent, 1500ms);
  ASSERT_FALSE(run.server);
  EXPECT_EQ(run.server.error().code, errc::deadline_exceeded) << run.server.error().to_string();
  EXPECT_NE(run.server.error().message.find("worker rank 2 sent no gradient within 1500 ms"),
            std::string::npos)
      << run.server.error().message;
  EXPECT_GE(run.server_took, 1400ms);
  EXPECT_LT(run.server_took, 10s);
  ASSERT_FALSE(run.worker);
}

TEST(ParameterServer, RefusesAGroupOfOneRank) {
  const auto data = synthetic(64);
  collective::InProcessGroup group(1);
  collective::Communicator comm(group.transport(0), "ps-test", 5s);
  auto result = train_data_parallel(comm, data, ps_options());
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, errc::invalid_argument);
  EXPECT_NE(result.error().message.find("at least 2 ranks"), std::string::npos)
      << result.error().message;
}

TEST(ParameterServer, RefusesEasgdAtTheSameTime) {
  const auto data = synthetic(64);
  collective::InProcessGroup group(2);
  collective::Communicator comm(group.transport(0), "ps-test", 5s);
  auto options = ps_options();
  options.easgd_alpha = 0.3f;
  auto result = train_data_parallel(comm, data, options);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, errc::invalid_argument);
}

}  // namespace
}  // namespace fedcore::distributed
