// Checkpoint retention (ServerOptions::keep_checkpoints): the files of each run's newest N
// committed rounds stay, older ones go as rounds commit, and their rows say when. Real
// SQLite history and checkpoint files; the run controller on a ManualClock, its round
// committed inline or by a background job on a second connection (as the server does).
#include <filesystem>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "server/federation/orphan_checkpoints.hpp"
#include "tests/federation/storage_rig.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::federation {
namespace {

namespace fs = std::filesystem;
using fedcore::testing::TempDir;
using testing::StorageRig;

// Runs each job at once, on the calling thread: the hand-off path, without threads.
class ImmediateBackground final : public BackgroundWork {
 public:
  void start(std::function<void()> job) override { job(); }
  void finish() override {}
};

fs::path checkpoint_file(const TempDir& dir, std::int64_t run, int round) {
  return fs::path(dir.path("ckpt")) / ("run-" + std::to_string(run)) /
         ("round-" + std::to_string(round) + ".fcp");
}

// false: no background work, every round commits inline; true: rounds are handed off and
// commit on the second connection (the worker's path).
struct Retention : ::testing::TestWithParam<bool> {
  TempDir dir;
  ImmediateBackground background;
  std::unique_ptr<StorageRig> rig = make_rig();

  std::unique_ptr<StorageRig> make_rig() {
    return std::make_unique<StorageRig>(dir.path("history.db"), dir.path("ckpt"), nullptr,
                                        StorageRetry{}, GetParam() ? &background : nullptr,
                                        GetParam(), nullptr, /*keep_checkpoints=*/2);
  }

  // Starts a run of `total` rounds and answers its first `answered`; the run's id (0 on
  // failure, reported).
  std::int64_t run_rounds(int total, int answered) {
    auto id = rig->controller->start_run(testing::storage_test_run(total));
    EXPECT_TRUE(id) << id.error().message;
    rig->controller->poll();
    for (int round = 1; round <= answered; ++round) {
      rig->answer_round();
    }
    return id ? *id : 0;
  }
};

TEST_P(Retention, KeepsTheNewestFilesAndMarksTheOthersRemoved) {
  const auto id = run_rounds(5, 5);
  ASSERT_EQ(rig->committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3, 4, 5}));

  auto checkpoints = rig->store->list_checkpoints(id);
  ASSERT_TRUE(checkpoints) << checkpoints.error().message;
  ASSERT_EQ(checkpoints->size(), 5u);
  for (const auto& c : *checkpoints) {
    const bool kept = c.round >= 4;
    EXPECT_EQ(fs::exists(c.ref.path), kept) << c.ref.path;
    EXPECT_EQ(c.removed_ms.has_value(), !kept) << "round " << c.round;
    if (!kept) {
      EXPECT_EQ(*c.removed_ms, rig->clock.wall_ms());
    }
  }
  // What stays is complete: the two newest files decode (their CRC trailers checked).
  EXPECT_EQ(rig->store->referenced_checkpoint_paths()->size(), 2u);
  for (int round : {4, 5}) {
    auto bundle = model::load_params(checkpoint_file(dir, id, round).string());
    EXPECT_TRUE(bundle) << bundle.error().message;
  }
  EXPECT_EQ((*rig->store->latest_checkpoint(id))->round, 5);
}

// A restart after round 3 resumes from round 3's file (never removed: it is the newest),
// and the run finishes with the same retention.
TEST_P(Retention, ARestartResumesFromTheNewestFile) {
  const auto id = run_rounds(5, 3);
  ASSERT_EQ(rig->committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3}));
  rig->controller->shutdown();
  rig.reset();
  EXPECT_FALSE(fs::exists(checkpoint_file(dir, id, 1)));

  rig = make_rig();
  ASSERT_TRUE(rig->controller->resume_runs());
  rig->controller->poll();
  ASSERT_EQ(rig->clients.pending.size(), 2u) << "round 4 went out after the restart";
  EXPECT_EQ(rig->clients.pending.at("a").request.round, 4);
  rig->answer_round();
  rig->answer_round();
  EXPECT_EQ(rig->committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3, 4, 5}));
  for (int round = 1; round <= 5; ++round) {
    EXPECT_EQ(fs::exists(checkpoint_file(dir, id, round)), round >= 4) << "round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(CommitThread, Retention, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "OnTheWorker" : "Inline"; });

// A crash between the commit that retired a file and its deletion leaves the file on disk;
// no kept row names it, so the start-up sweep removes it, and the kept files stay.
TEST(RetentionSweep, AFileRetentionDidNotDeleteGoesAtTheNextStart) {
  TempDir dir;
  std::int64_t id = 0;
  {
    StorageRig rig(dir.path("history.db"), dir.path("ckpt"), nullptr, {}, nullptr, false, nullptr,
                   /*keep_checkpoints=*/1);
    auto started = rig.controller->start_run(testing::storage_test_run(3));
    ASSERT_TRUE(started) << started.error().message;
    id = *started;
    rig.controller->poll();
    rig.answer_round();
    rig.answer_round();
  }
  const auto retired = checkpoint_file(dir, id, 1);
  ASSERT_FALSE(fs::exists(retired));
  fs::copy_file(checkpoint_file(dir, id, 2), retired);  // as if the unlink never ran

  auto store = store::HistoryStore::open(dir.path("history.db"));
  ASSERT_TRUE(store) << store.error().message;
  auto sweep = remove_orphan_checkpoints(*store, dir.path("ckpt"));
  ASSERT_TRUE(sweep) << sweep.error().message;
  EXPECT_EQ(sweep->removed, std::vector<std::string>{retired.string()});
  EXPECT_FALSE(fs::exists(retired));
  EXPECT_TRUE(fs::exists(checkpoint_file(dir, id, 2)));
}

}  // namespace
}  // namespace fedcore::federation
