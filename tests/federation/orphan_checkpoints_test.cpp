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

TEST(OrphanCheckpoints, RemovesOnlyUncommittedFilesTheServerWrote) {
  fedcore::testing::TempDir temp;
  auto store = store::HistoryStore::open(temp.path("history.db"));
  ASSERT_TRUE(store) << store.error().to_string();
  auto run = store->create_run("r", "{}", 5, 1);
  ASSERT_TRUE(run);
  ASSERT_TRUE(store->set_run_state(run->id, store::RunState::running, "", 2));
  const fs::path dir = temp.path("checkpoints");
  const fs::path committed = dir / "run-1" / "round-1.fcp";
  touch(committed);
  ASSERT_TRUE(store->commit_round(store::testing::make_round(run->id, 1), {},
                                  store::testing::make_checkpoint(committed.string())));
  const fs::path orphan = dir / "run-1" / "round-2.fcp";
  const fs::path half_written = dir / "run-1" / "round-3.fcp.tmp";
  const fs::path operators_file = dir / "run-1" / "notes.txt";
  const fs::path elsewhere = dir / "round-9.fcp";  // not inside a run folder
  for (const auto& p : {orphan, half_written, operators_file, elsewhere}) {
    touch(p);
  }

  auto sweep = remove_orphan_checkpoints(*store, dir.string());
  ASSERT_TRUE(sweep) << sweep.error().to_string();
  EXPECT_EQ(sweep->kept, 1u);
  EXPECT_EQ(sweep->removed.size(), 2u);
  EXPECT_TRUE(fs::exists(committed));
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_FALSE(fs::exists(half_written));
  EXPECT_TRUE(fs::exists(operators_file));
  EXPECT_TRUE(fs::exists(elsewhere));

  // A second sweep finds nothing more.
  sweep = remove_orphan_checkpoints(*store, dir.string());
  ASSERT_TRUE(sweep);
  EXPECT_TRUE(sweep->removed.empty());
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
