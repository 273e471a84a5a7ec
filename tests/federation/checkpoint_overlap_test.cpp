// Issue 20, the checkpoint write overlapping the next round (run_controller.hpp,
// "Overlap"): a manual BackgroundWork keeps each write until the test runs it, so every
// order of "the write finishes" and "the next round does something" is tried without a
// thread or a sleep. The history is a real SQLite file and the checkpoints real files.
#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>

#include <gtest/gtest.h>

#include "tests/federation/storage_rig.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::federation {
namespace {

using namespace std::chrono_literals;
using fedcore::testing::TempDir;
using testing::kDiskFull;
using testing::StorageRig;
using testing::SwitchableDisks;

// Jobs wait until the test runs them, or until the controller needs them done (finish()).
class ManualBackground final : public BackgroundWork {
 public:
  void start(std::function<void()> job) override {
    ++started;
    jobs.push_back(std::move(job));
  }
  void finish() override {
    ++finishes;
    run_all();
  }
  void run_all() {
    while (!jobs.empty()) {
      auto job = std::move(jobs.front());
      jobs.pop_front();
      job();
    }
  }

  std::deque<std::function<void()>> jobs;
  int started = 0;
  int finishes = 0;  // times the controller had to wait for a write
};

constexpr StorageRetry kRetry{2s, 16s, 1 << 20};

struct Overlap : ::testing::Test {
  TempDir dir;
  SwitchableDisks disks;
  ManualBackground background;
  StorageRig rig{dir.path("history.db"), dir.path("ckpt"), &disks, kRetry, &background};

  std::int64_t start(int rounds) {
    auto id = rig.controller->start_run(testing::storage_test_run(rounds));
    EXPECT_TRUE(id) << id.error().message;
    rig.controller->poll();
    return id ? *id : 0;
  }
  std::vector<store::RoundRecord> rounds(std::int64_t id) {
    auto rows = rig.store->list_rounds(id);
    EXPECT_TRUE(rows) << rows.error().message;
    return rows ? *rows : std::vector<store::RoundRecord>{};
  }
};

// Round 1's model goes out to round 2 before round 1's file is written; round 1 commits
// once it is, and its own time stops at the hand-off. The last round waits for the write
// before it and commits inline.
TEST_F(Overlap, TheNextRoundStartsWhileTheCheckpointIsWrittenAndRoundsCommitInOrder) {
  const auto id = start(3);
  ASSERT_EQ(rig.clients.pending.size(), 2u);
  const auto first_global = *rig.clients.pending.at("a").global;
  rig.answer_round(0.25f);

  // Round 2 is out, with round 1's aggregate; round 1 is not committed yet.
  ASSERT_EQ(background.jobs.size(), 1u);
  ASSERT_EQ(rig.clients.pending.size(), 2u);
  EXPECT_EQ(rig.clients.pending.at("a").request.round, 2);
  EXPECT_EQ(rig.controller->active_round(), 2);
  const auto& second_global = *rig.clients.pending.at("a").global;
  ASSERT_EQ(second_global.size(), first_global.size());
  for (std::size_t i = 0; i < first_global.size(); ++i) {
    EXPECT_NEAR(second_global[i], first_global[i] + 0.25f, 1e-6) << i;
  }
  EXPECT_TRUE(rig.committed.empty());
  EXPECT_TRUE(rounds(id).empty());
  EXPECT_EQ(rig.run(id).last_round, 0);

  // The write finishes 4 s later: round 1 commits with its file, and its recorded time
  // ends at the hand-off, not when the file was done.
  rig.clock.advance(4s);
  background.run_all();
  rig.controller->poll();
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(rig.run(id).last_round, 1);
  EXPECT_EQ(rig.verify_checkpoints(id), 1u);
  auto phases = rig.store->list_round_phases(id);
  ASSERT_TRUE(phases) << phases.error().message;
  ASSERT_EQ(phases->size(), 1u);
  EXPECT_EQ((*phases)[0].round, 1);
  EXPECT_LT((*phases)[0].total_ms, 4000.0);
  EXPECT_EQ(rig.controller->active_round(), 2);

  // Round 2 hands off too, and its write is still queued when round 3 (the last) closes:
  // round 3 waits for it, then commits inline.
  rig.answer_round();
  ASSERT_EQ(background.jobs.size(), 1u);
  EXPECT_EQ(rig.controller->active_round(), 3);
  EXPECT_EQ(background.finishes, 0);
  rig.answer_round();
  EXPECT_EQ(background.finishes, 1);
  EXPECT_EQ(background.started, 2);  // rounds 1 and 2; the last round wrote inline
  EXPECT_TRUE(background.jobs.empty());
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(rig.run(id).state, store::RunState::finished);
  EXPECT_EQ(rig.verify_checkpoints(id), 3u);
  const auto rows = rounds(id);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.finished_ms < b.finished_ms;
  }));
}

// The disk refuses round 1's file while round 2 runs: nothing of either is recorded, the
// run is held for its storage after round 0, and once the disk takes writes it runs round
// 1 again.
TEST_F(Overlap, AFailedWriteAbandonsTheRoundThatStartedFromItsModelAndHoldsTheRun) {
  const auto id = start(3);
  rig.answer_round();
  ASSERT_EQ(rig.controller->active_round(), 2);
  disks.refuse(kDiskFull);
  background.run_all();
  rig.controller->poll();

  EXPECT_FALSE(rig.controller->run_active());
  const auto& hold = rig.controller->storage_hold();
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->after_round, 0);
  EXPECT_EQ(hold->reason, "disk full: cannot write '" + dir.path("ckpt") +
                              "/run-1/round-1.fcp.tmp': No space left on device");
  EXPECT_EQ(rig.run(id).state, store::RunState::paused);
  EXPECT_EQ(rig.run(id).last_round, 0);
  EXPECT_TRUE(rounds(id).empty());  // neither round 1 nor the abandoned round 2
  EXPECT_TRUE(rig.committed.empty());
  EXPECT_EQ(rig.events.count("storage_fault"), 1u);
  EXPECT_TRUE(rig.temp_files().empty());

  disks.refuse(std::nullopt);
  rig.advance(2s);
  ASSERT_TRUE(rig.controller->run_active());
  ASSERT_EQ(rig.clients.pending.size(), 2u);
  EXPECT_EQ(rig.clients.pending.at("a").request.round, 1);
  rig.answer_round();
  rig.answer_round();
  rig.answer_round();
  EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(rig.run(id).state, store::RunState::finished);
  EXPECT_EQ(rig.verify_checkpoints(id), 3u);
}

// An admin's stop while round 1's file is written: round 1 commits first (it finished
// before the stop), round 2 is abandoned.
TEST_F(Overlap, AStopWhileTheFileIsWrittenCommitsThatRoundFirst) {
  const auto id = start(3);
  rig.answer_round();
  ASSERT_EQ(background.jobs.size(), 1u);
  ASSERT_TRUE(rig.controller->stop_run(id));
  EXPECT_EQ(background.finishes, 1);
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(rig.run(id).state, store::RunState::stopped);
  EXPECT_EQ(rig.run(id).last_round, 1);
  EXPECT_EQ(rounds(id).size(), 1u);
  EXPECT_FALSE(rig.controller->run_active());
}

// Round 2 misses its quorum while round 1's file is still queued: round 1 is committed
// before round 2's failed attempt is recorded, so the history reads in order.
TEST_F(Overlap, AFailedRoundIsRecordedAfterTheRoundBeforeItCommits) {
  const auto id = start(3);
  rig.answer_round();
  ASSERT_EQ(background.jobs.size(), 1u);
  rig.clients.pending.clear();  // nobody answers round 2
  rig.advance(10s);             // its deadline
  EXPECT_EQ(background.finishes, 1);
  const auto rows = rounds(id);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].round, 1);
  EXPECT_EQ(rows[0].state, store::RoundState::committed);
  EXPECT_EQ(rows[1].round, 2);
  EXPECT_EQ(rows[1].state, store::RoundState::failed);
  EXPECT_LE(rows[0].finished_ms, rows[1].finished_ms);
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1}));
}

// A one-round run has no next round to overlap: the write is inline.
TEST_F(Overlap, TheLastRoundWritesInline) {
  const auto id = start(1);
  rig.answer_round();
  EXPECT_EQ(background.started, 0);
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(rig.run(id).state, store::RunState::finished);
}

}  // namespace
}  // namespace fedcore::federation
