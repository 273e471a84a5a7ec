// Issue 20, the checkpoint write overlapping the next round (run_controller.hpp,
// "Overlap"): a manual BackgroundWork keeps each write until the test runs it, so every
// order of "the write finishes" and "the next round does something" is tried without a
// thread or a sleep. The history is a real SQLite file and the checkpoints real files.
#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>

#include <gtest/gtest.h>

#include "server/federation/held_announcements.hpp"
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

// Every test runs twice: the handed-off round commits on the controller's thread when it
// settles (false), or on the worker right after its file, through a second connection
// (true: what the server does with a file-backed history).
struct Overlap : ::testing::TestWithParam<bool> {
  TempDir dir;
  SwitchableDisks disks;
  ManualBackground background;
  StorageRig rig{dir.path("history.db"), dir.path("ckpt"), &disks, kRetry, &background, GetParam()};

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
TEST_P(Overlap, TheNextRoundStartsWhileTheCheckpointIsWrittenAndRoundsCommitInOrder) {
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
TEST_P(Overlap, AFailedWriteAbandonsTheRoundThatStartedFromItsModelAndHoldsTheRun) {
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
TEST_P(Overlap, AStopWhileTheFileIsWrittenCommitsThatRoundFirst) {
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
TEST_P(Overlap, AFailedRoundIsRecordedAfterTheRoundBeforeItCommits) {
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
TEST_P(Overlap, TheLastRoundWritesInline) {
  const auto id = start(1);
  rig.answer_round();
  EXPECT_EQ(background.started, 0);
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(rig.run(id).state, store::RunState::finished);
}

INSTANTIATE_TEST_SUITE_P(CommitOn, Overlap, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "TheWorker" : "TheControllersThread";
                         });

// A sink like the server's: events written to the history at once, except while a round
// commits on the worker, when they are kept and written after it; announcements held
// meanwhile and let out in id order.
class StoredEvents final : public EventSink {
 public:
  void record(std::string_view kind, std::optional<std::int64_t> run,
              std::optional<std::int64_t> round, std::string_view client_id,
              std::string detail_json) override {
    store::EventRecord e;
    e.kind = std::string(kind);
    e.run_id = run;
    e.round = round;
    e.client_id = std::string(client_id);
    e.detail_json = std::move(detail_json);
    if (held.held()) {
      held.defer(std::move(e));
      return;
    }
    auto id = store->append_event(e);
    ASSERT_TRUE(id) << id.error().message;
    e.id = *id;
    announce(e);
  }
  void announce(const store::EventRecord& e) override {
    if (!held.keep(e)) {
      announced.push_back(e);
    }
  }
  void hold_announcements() override { held.hold(); }
  void release_announcements() override {
    for (auto& e : held.release(*store)) {
      announced.push_back(std::move(e));
    }
  }
  // "kind round" of every announced event, in order.
  std::vector<std::string> kinds() const {
    std::vector<std::string> out;
    for (const auto& e : announced) {
      out.push_back(e.kind + " " + std::to_string(e.round.value_or(0)));
    }
    return out;
  }

  store::HistoryStore* store = nullptr;
  HeldAnnouncements held;
  std::vector<store::EventRecord> announced;
};

struct OverlapOnTheWorker : ::testing::Test {
  TempDir dir;
  ManualBackground background;
  StoredEvents sink;
  StorageRig rig{
      dir.path("history.db"), dir.path("ckpt"), nullptr, kRetry, &background, true, &sink};
  OverlapOnTheWorker() { sink.store = &*rig.store; }

  bool announced_in_id_order() const {
    return std::is_sorted(sink.announced.begin(), sink.announced.end(),
                          [](const auto& a, const auto& b) { return a.id < b.id; });
  }
};

// The worker commits round 1 right after its file; the controller reports it (hook,
// last_round, the announcement) when it next polls. The event of an update of round 2
// that arrives in between is kept, not written (the controller's thread never waits for
// the worker's lock), and written when round 1 settles: its id is larger, and it goes out
// after round 1's "round_committed", never before it.
TEST_F(OverlapOnTheWorker, TheRoundCommitsThereAndEventsAreAnnouncedInIdOrder) {
  auto id = rig.controller->start_run(testing::storage_test_run(3));
  ASSERT_TRUE(id) << id.error().message;
  rig.controller->poll();
  rig.answer_round();
  ASSERT_EQ(background.jobs.size(), 1u);
  ASSERT_EQ(rig.controller->active_round(), 2);

  background.run_all();  // the worker: round 1's file, then its transaction
  EXPECT_EQ(rig.committed_rounds(*id), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(rig.verify_checkpoints(*id), 1u);
  EXPECT_TRUE(rig.committed.empty());  // not reported yet
  auto stored = rig.store->list_events(0, 100);
  ASSERT_TRUE(stored) << stored.error().message;
  ASSERT_FALSE(stored->empty());
  EXPECT_EQ(stored->back().kind, "round_committed");
  const auto committed_id = stored->back().id;

  rig.answer_one("a");  // round 2's first update, before the controller polls
  auto later = rig.store->list_events(committed_id, 100);
  ASSERT_TRUE(later) << later.error().message;
  EXPECT_TRUE(later->empty()) << "written while the round committed on the worker";
  for (const auto& e : sink.announced) {
    EXPECT_LT(e.id, committed_id) << e.kind << " went out while the commit was held";
  }

  rig.controller->poll();
  later = rig.store->list_events(committed_id, 100);
  ASSERT_TRUE(later) << later.error().message;
  // Round 2's start too was recorded after the hand-off: it now follows round 1's commit.
  ASSERT_EQ(later->size(), 2u);
  EXPECT_EQ((*later)[0].kind, "round_started");
  EXPECT_EQ((*later)[0].round, 2);
  EXPECT_EQ((*later)[1].kind, "update_accepted");
  EXPECT_EQ((*later)[1].client_id, "a");
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(rig.run(*id).last_round, 1);
  EXPECT_TRUE(announced_in_id_order()) << ::testing::PrintToString(sink.kinds());
  const auto kinds = sink.kinds();
  const auto at = [&](const std::string& k) {
    return std::find(kinds.begin(), kinds.end(), k) - kinds.begin();
  };
  ASSERT_LT(at("round_committed 1"), static_cast<long>(kinds.size()));
  EXPECT_LT(at("round_committed 1"), at("update_accepted 2"));
  EXPECT_FALSE(sink.held.held());
  auto phases = rig.store->list_round_phases(*id);
  ASSERT_TRUE(phases) << phases.error().message;
  ASSERT_EQ(phases->size(), 1u);

  // Nothing is held between commits: round 2's second update goes out at once.
  const auto before = sink.announced.size();
  rig.answer_one("b");
  EXPECT_GT(sink.announced.size(), before);
  rig.controller->poll();
  background.run_all();
  rig.controller->poll();
  rig.answer_round();  // round 3, the last, commits inline
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(rig.run(*id).state, store::RunState::finished);
  EXPECT_EQ(rig.verify_checkpoints(*id), 3u);
  EXPECT_TRUE(announced_in_id_order()) << ::testing::PrintToString(sink.kinds());
  EXPECT_FALSE(sink.held.held());
}

// When the worker's file write fails there is no commit; the events held meanwhile go out
// (in id order) when the controller settles the round, and nothing stays held.
TEST_F(OverlapOnTheWorker, AFailedWriteReleasesTheHeldEvents) {
  SwitchableDisks disks;
  TempDir other;
  StoredEvents events;
  StorageRig failing{
      other.path("history.db"), other.path("ckpt"), &disks, kRetry, &background, true, &events};
  events.store = &*failing.store;
  auto id = failing.controller->start_run(testing::storage_test_run(3));
  ASSERT_TRUE(id) << id.error().message;
  failing.controller->poll();
  failing.answer_round();
  ASSERT_EQ(background.jobs.size(), 1u);
  EXPECT_TRUE(events.held.held());
  disks.refuse(kDiskFull);
  background.run_all();
  failing.answer_one("a");  // kept, written when the round settles
  const auto held_before = events.announced.size();
  failing.controller->poll();
  EXPECT_FALSE(events.held.held());
  EXPECT_GT(events.announced.size(), held_before);
  EXPECT_FALSE(failing.controller->run_active());
  EXPECT_TRUE(failing.committed_rounds(*id).empty());
  EXPECT_TRUE(std::is_sorted(events.announced.begin(), events.announced.end(),
                             [](const auto& a, const auto& b) { return a.id < b.id; }));
  const auto kinds = events.kinds();
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "storage_fault 1"), kinds.end())
      << ::testing::PrintToString(kinds);
  EXPECT_EQ(std::find(kinds.begin(), kinds.end(), "round_committed 1"), kinds.end());
}

// Keeps each job's two parts apart, like the server's two writer threads: a later round's
// file may be written before an earlier round's commit. Parts run only when the test says
// so, or in order when the controller waits: all of them (finish()), or, job by job, only
// until what it waits for is there (finish_until()).
class TwoPartBackground final : public BackgroundWork {
 public:
  void start(std::function<void()> job) override {
    start(std::move(job), [] {});
  }
  void start(std::function<void()> write, std::function<void()> then) override {
    jobs.push_back({std::move(write), std::move(then)});
  }
  void finish() override {
    ++finishes;
    while (run_write()) {
    }
    while (run_then()) {
    }
  }
  void finish_until(const std::function<bool()>& done) override {
    ++partial_finishes;
    while (!done()) {
      if (!run_then() && !run_write()) {
        return;
      }
    }
  }
  // The oldest file not written yet; false when there is none.
  bool run_write() {
    if (written == jobs.size()) {
      return false;
    }
    jobs[written++].first();
    return true;
  }
  // The oldest commit whose file is written; false when there is none.
  bool run_then() {
    if (committed == written) {
      return false;
    }
    jobs[committed++].second();
    return true;
  }
  std::size_t handed_off() const { return jobs.size(); }

  std::vector<std::pair<std::function<void()>, std::function<void()>>> jobs;
  std::size_t written = 0;
  std::size_t committed = 0;
  int finishes = 0;
  int partial_finishes = 0;
};

struct TwoRoundsHandedOff : ::testing::Test {
  TempDir dir;
  SwitchableDisks disks;
  TwoPartBackground background;
  StoredEvents sink;
  StorageRig rig{
      dir.path("history.db"), dir.path("ckpt"), &disks, kRetry, &background, true, &sink};
  TwoRoundsHandedOff() { sink.store = &*rig.store; }

  std::int64_t start(int rounds) {
    auto id = rig.controller->start_run(testing::storage_test_run(rounds));
    EXPECT_TRUE(id) << id.error().message;
    rig.controller->poll();
    return id ? *id : 0;
  }
};

// Round 2 closes while round 1 is still being written: it hands off too, without waiting.
// Round 2's file is written before round 1 commits; both commit in order, and the events
// go out in id order once neither is left.
TEST_F(TwoRoundsHandedOff, ASecondRoundHandsOffWhileTheFirstIsWrittenAndBothCommitInOrder) {
  const auto id = start(4);
  rig.answer_round();
  rig.answer_round();
  ASSERT_EQ(background.handed_off(), 2u);
  EXPECT_EQ(background.finishes, 0);
  EXPECT_EQ(rig.controller->active_round(), 3);

  ASSERT_TRUE(background.run_write());  // round 1's file
  ASSERT_TRUE(background.run_write());  // round 2's file, before round 1 commits
  EXPECT_TRUE(rig.committed_rounds(id).empty());
  ASSERT_TRUE(background.run_then());  // round 1's commit
  rig.controller->poll();
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1}));
  EXPECT_TRUE(sink.held.held());  // round 2 is still handed off
  ASSERT_TRUE(background.run_then());
  rig.controller->poll();
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(rig.run(id).last_round, 2);
  EXPECT_FALSE(sink.held.held());
  EXPECT_TRUE(std::is_sorted(sink.announced.begin(), sink.announced.end(),
                             [](const auto& a, const auto& b) { return a.id < b.id; }))
      << ::testing::PrintToString(sink.kinds());

  // Round 3 hands off, round 4 (the last) waits for it and commits inline.
  rig.answer_round();
  rig.answer_round();
  EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(rig.run(id).state, store::RunState::finished);
  EXPECT_EQ(rig.verify_checkpoints(id), 4u);
  EXPECT_FALSE(sink.held.held());
}

// With two rounds handed off and neither written, the third waits before it hands off,
// never leaving more than two: for the first of them only, whose file and commit it needs;
// the second's file is not waited for.
TEST_F(TwoRoundsHandedOff, AThirdRoundWaitsForTheOldestOfTheTwoBeforeIt) {
  const auto id = start(5);
  rig.answer_round();
  rig.answer_round();
  ASSERT_EQ(background.handed_off(), 2u);
  rig.answer_round();
  EXPECT_EQ(background.finishes, 0);
  EXPECT_EQ(background.partial_finishes, 1);
  EXPECT_EQ(background.written, 1u);  // round 2's file is not written yet
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(background.handed_off(), 3u);
  EXPECT_EQ(rig.controller->active_round(), 4);
  EXPECT_EQ(rig.run(id).last_round, 1);

  // Round 4 waits for round 2 alone in turn; round 5, the run's last, for everything.
  rig.answer_round();
  EXPECT_EQ(background.written, 2u);
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1, 2}));
  rig.answer_round();
  EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(rig.run(id).state, store::RunState::finished);
}

// Announcements wait while any round is handed off; a federation whose rounds always find
// one still writing would hold them for ever, so after kMaxHoldingAnnouncements a closing
// round waits for every round handed off before it hands off itself.
TEST_F(TwoRoundsHandedOff, AnnouncementsHeldTooLongMakeTheNextRoundWait) {
  start(5);
  rig.answer_round();
  ASSERT_EQ(background.handed_off(), 1u);
  rig.clock.advance(199ms);
  rig.answer_round();  // one handed off, held for less than the bound: no wait
  EXPECT_EQ(background.finishes + background.partial_finishes, 0);
  EXPECT_EQ(background.handed_off(), 2u);
  ASSERT_TRUE(background.run_write());
  ASSERT_TRUE(background.run_then());
  rig.controller->poll();  // round 1 commits; round 2 keeps the announcements held
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1}));
  ASSERT_TRUE(sink.held.held());
  rig.clock.advance(1ms);  // 200 ms since the first hand-off, and still holding
  rig.answer_round();
  EXPECT_EQ(background.partial_finishes, 1);
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(background.handed_off(), 3u);  // round 3, after the wait
  EXPECT_TRUE(sink.held.held());           // a new hold, for round 3 only
}

// Round 1's file cannot be written. Round 2, built on its model, had handed off too: its
// file is written, but its commit finds round 1 missing and writes nothing, and it goes
// with round 1 (abandoned, an orphan file). The run is held for its storage, and once the
// disk takes writes again every round is run again and commits.
TEST_F(TwoRoundsHandedOff, AFailedFirstRoundTakesTheSecondWithIt) {
  const auto id = start(3);
  rig.answer_round();
  rig.answer_round();
  ASSERT_EQ(background.handed_off(), 2u);
  disks.refuse(kDiskFull);
  ASSERT_TRUE(background.run_write());  // round 1: refused
  disks.refuse(std::nullopt);
  ASSERT_TRUE(background.run_write());  // round 2: written
  ASSERT_TRUE(background.run_then());
  ASSERT_TRUE(background.run_then());  // round 2's commit: round 1 is not there
  rig.controller->poll();

  EXPECT_FALSE(rig.controller->run_active());
  ASSERT_TRUE(rig.controller->storage_hold().has_value());
  EXPECT_EQ(rig.controller->storage_hold()->after_round, 0);
  EXPECT_TRUE(rig.committed_rounds(id).empty());
  EXPECT_TRUE(rig.committed.empty());
  EXPECT_EQ(rig.run(id).last_round, 0);
  EXPECT_FALSE(sink.held.held());
  const auto kinds = sink.kinds();
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "storage_fault 1"), kinds.end())
      << ::testing::PrintToString(kinds);

  rig.advance(2s);
  ASSERT_TRUE(rig.controller->run_active());
  rig.answer_round();
  rig.answer_round();
  rig.answer_round();
  background.finish();
  rig.controller->poll();
  EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(rig.run(id).state, store::RunState::finished);
  EXPECT_EQ(rig.verify_checkpoints(id), 3u);
}

TEST(HeldAnnouncements, KeepsNothingUnlessHeldAndReleasesInIdOrderAfterTheLastHold) {
  auto history = store::HistoryStore::open(":memory:");
  ASSERT_TRUE(history) << history.error().message;
  HeldAnnouncements held;
  store::EventRecord e;
  e.kind = "written";
  e.id = 5;
  EXPECT_FALSE(held.keep(e));
  held.hold();
  held.hold();
  for (std::int64_t id : {9, 7, 0, 8}) {
    e.id = id;
    EXPECT_TRUE(held.keep(e));
  }
  EXPECT_TRUE(held.release(*history).empty());  // one hold is left
  EXPECT_TRUE(held.held());
  std::vector<std::int64_t> ids;
  for (const auto& kept : held.release(*history)) {
    ids.push_back(kept.id);
  }
  EXPECT_EQ(ids, (std::vector<std::int64_t>{0, 7, 8, 9}));
  EXPECT_FALSE(held.held());
  EXPECT_FALSE(held.keep(e));
}

// An event of `kind` about `client`, not written yet.
store::EventRecord event_of(std::string kind, std::string client = "") {
  store::EventRecord e;
  e.kind = std::move(kind);
  e.client_id = std::move(client);
  e.detail_json = "{}";
  return e;
}

// Events recorded while held are written only at the last release, in one go and in the
// order they came, and go out after everything kept.
TEST(HeldAnnouncements, WritesWhatWasDeferredAtTheLastReleaseAfterTheKeptOnes) {
  auto history = store::HistoryStore::open(":memory:");
  ASSERT_TRUE(history) << history.error().message;
  HeldAnnouncements held;
  held.hold();
  auto committed = event_of("round_committed");
  auto committed_id = history->append_event(committed);  // as the worker's transaction would
  ASSERT_TRUE(committed_id) << committed_id.error().message;
  committed.id = *committed_id;
  for (const char* client : {"b", "a"}) {
    held.defer(event_of("update_accepted", client));
  }
  EXPECT_TRUE(held.keep(committed));
  auto before = history->list_events(0, 10);
  ASSERT_TRUE(before) << before.error().message;
  EXPECT_EQ(before->size(), 1u) << "a deferred event was written before the release";

  const auto out = held.release(*history);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].kind, "round_committed");
  EXPECT_EQ(out[1].client_id, "b");
  EXPECT_EQ(out[2].client_id, "a");
  EXPECT_GT(out[1].id, out[0].id);
  EXPECT_GT(out[2].id, out[1].id);
  auto stored = history->list_events(0, 10);
  ASSERT_TRUE(stored) << stored.error().message;
  ASSERT_EQ(stored->size(), 3u);
  EXPECT_EQ((*stored)[2].id, out[2].id);
  EXPECT_EQ((*stored)[2].client_id, "a");
}

// A deferred event the store refuses (an empty kind) costs only itself.
TEST(HeldAnnouncements, ADeferredEventTheStoreRefusesLosesNoOther) {
  auto history = store::HistoryStore::open(":memory:");
  ASSERT_TRUE(history) << history.error().message;
  HeldAnnouncements held;
  held.hold();
  const auto good = event_of("client_connected");
  const auto bad = event_of("");
  held.defer(good);
  held.defer(bad);
  held.defer(good);
  const auto out = held.release(*history);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_GT(out[0].id, 0);
  EXPECT_EQ(out[1].id, 0);
  EXPECT_GT(out[2].id, out[0].id);
  auto stored = history->list_events(0, 10);
  ASSERT_TRUE(stored) << stored.error().message;
  EXPECT_EQ(stored->size(), 2u);
}

}  // namespace
}  // namespace fedcore::federation
