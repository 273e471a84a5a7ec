// The start-up sweep of checkpoint files that were written but never committed.
#include "server/federation/orphan_checkpoints.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/store/store_fixtures.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::federation {
namespace {

namespace fs = std::filesystem;

void touch(const fs::path& p) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "x";
}

// A store with run 1 running and its round 1 committed with the checkpoint `committed`
// (created), as the server leaves them after a round.
store::HistoryStore store_with_round_one(const fedcore::testing::TempDir& temp,
                                         const fs::path& committed) {
  auto store = store::HistoryStore::open(temp.path("history.db"));
  EXPECT_TRUE(store) << store.error().to_string();
  auto run = store->create_run("r", "{}", 5, 1);
  EXPECT_TRUE(run);
  EXPECT_TRUE(store->set_run_state(run->id, store::RunState::running, "", 2));
  touch(committed);
  EXPECT_TRUE(store->commit_round(store::testing::make_round(run->id, 1), {},
                                  store::testing::make_checkpoint(committed.string())));
  return std::move(*store);
}

TEST(OrphanCheckpoints, RemovesOnlyUncommittedFilesTheServerWrote) {
  fedcore::testing::TempDir temp;
  const fs::path dir = temp.path("checkpoints");
  const fs::path committed = dir / "run-1" / "round-1.fcp";
  auto store = store_with_round_one(temp, committed);
  const fs::path orphan = dir / "run-1" / "round-2.fcp";
  const fs::path half_written = dir / "run-1" / "round-3.fcp.tmp";
  const fs::path operators_file = dir / "run-1" / "notes.txt";
  const fs::path elsewhere = dir / "round-9.fcp";  // not inside a run folder
  for (const auto& p : {orphan, half_written, operators_file, elsewhere}) {
    touch(p);
  }

  auto sweep = remove_orphan_checkpoints(store, dir.string());
  ASSERT_TRUE(sweep) << sweep.error().to_string();
  EXPECT_EQ(sweep->kept, 1u);
  EXPECT_EQ(sweep->removed.size(), 2u);
  EXPECT_TRUE(fs::exists(committed));
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_FALSE(fs::exists(half_written));
  EXPECT_TRUE(fs::exists(operators_file));
  EXPECT_TRUE(fs::exists(elsewhere));

  // A second sweep finds nothing more.
  sweep = remove_orphan_checkpoints(store, dir.string());
  ASSERT_TRUE(sweep);
  EXPECT_TRUE(sweep->removed.empty());
}

// A strategy state file (server_state_file.hpp) lives and dies with its round's checkpoint.
TEST(OrphanCheckpoints, AStateFileIsAnOrphanExactlyWhenItsRoundsCheckpointIs) {
  fedcore::testing::TempDir temp;
  const fs::path dir = fs::path(temp.path("checkpoints")) / "run-1";
  auto store = store_with_round_one(temp, dir / "round-1.fcp");
  for (const char* name : {"round-1.state.fcp", "round-2.state.fcp", "round-2.state.fcp.tmp"}) {
    touch(dir / name);
  }
  auto sweep = remove_orphan_checkpoints(store, temp.path("checkpoints"));
  ASSERT_TRUE(sweep) << sweep.error().message;
  EXPECT_EQ(sweep->kept, 2u);
  EXPECT_EQ(sweep->removed.size(), 2u);
  EXPECT_TRUE(fs::exists(dir / "round-1.state.fcp"));
  EXPECT_FALSE(fs::exists(dir / "round-2.state.fcp"));
  EXPECT_FALSE(fs::exists(dir / "round-2.state.fcp.tmp"));
}

TEST(OrphanCheckpoints, AMissingDirectoryIsAnIoErrorNamingIt) {
  fedcore::testing::TempDir temp;
  auto store = store::HistoryStore::open(temp.path("history.db"));
  ASSERT_TRUE(store);
  auto sweep = remove_orphan_checkpoints(*store, temp.path("nowhere"));
  ASSERT_FALSE(sweep);
  EXPECT_EQ(sweep.error().code, errc::io_error);
  EXPECT_NE(sweep.error().message.find("nowhere"), std::string::npos);
}

}  // namespace
}  // namespace fedcore::federation
