// Issue 19, disk full and read-only database, at the store: the disk probe, and what the
// history does when SQLite cannot write (tests/store/fault_vfs.hpp refuses its writes and
// syncs the way a full or failing disk does). The round's transaction is all or nothing:
// a refused commit leaves no trace, and the same round commits once the disk is back.
#include <cerrno>
#include <filesystem>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "server/store/disk_probe.hpp"
#include "server/store/history_store.hpp"
#include "tests/store/fault_vfs.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::store {
namespace {

using fedcore::testing::TempDir;
using testing::FaultVfs;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::size_t entries(const std::string& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) {
    ++n;
  }
  return n;
}

TEST(DiskProbe, AWritableDirectoryTakesTheBytesAndKeepsNoFile) {
  TempDir dir;
  ASSERT_EQ(entries(dir.path()), 0u);
  auto probed = probe_directory(dir.path(), 3u << 20);
  ASSERT_TRUE(probed) << probed.error().message;
  EXPECT_EQ(entries(dir.path()), 0u);
  EXPECT_TRUE(probe_directory(dir.path(), 0));
}

TEST(DiskProbe, AMissingDirectoryIsNotFoundAndNamed) {
  TempDir dir;
  auto probed = probe_directory(dir.path("gone"), 4096);
  ASSERT_FALSE(probed);
  EXPECT_EQ(probed.error().code, errc::not_found);
  EXPECT_TRUE(contains(probed.error().message, dir.path("gone"))) << probed.error().message;
  EXPECT_TRUE(contains(probed.error().message, "No such file or directory"))
      << probed.error().message;
}

TEST(DiskProbe, SystemErrorsMapToTheDocumentedCodes) {
  EXPECT_EQ(errc_from_errno(ENOSPC), errc::resource_exhausted);
  EXPECT_EQ(errc_from_errno(EDQUOT), errc::resource_exhausted);
  EXPECT_EQ(errc_from_errno(EROFS), errc::permission_denied);
  EXPECT_EQ(errc_from_errno(EACCES), errc::permission_denied);
  EXPECT_EQ(errc_from_errno(EPERM), errc::permission_denied);
  EXPECT_EQ(errc_from_errno(ENOENT), errc::not_found);
  EXPECT_EQ(errc_from_errno(EIO), errc::io_error);
}

TEST(DiskProbe, DiskSpaceReportsTheFileSystem) {
  TempDir dir;
  auto space = disk_space(dir.path());
  ASSERT_TRUE(space) << space.error().message;
  EXPECT_GT(space->total_bytes, 0u);
  EXPECT_LE(space->available_bytes, space->total_bytes);
  EXPECT_FALSE(space->read_only);
  auto missing = disk_space(dir.path("gone"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::not_found);
}

// A run with round 1 committed (with a checkpoint row), on `store`.
std::int64_t run_with_one_round(HistoryStore& store) {
  ClientRecord client;
  client.id = "a";
  EXPECT_TRUE(store.upsert_client(client));
  auto run = store.create_run("r", "{}", 3, 1000);
  EXPECT_TRUE(run);
  EXPECT_TRUE(store.set_run_state(run->id, RunState::running, "", 1000));
  RoundRecord round;
  round.run_id = run->id;
  round.round = 1;
  ClientResult result;
  result.client_id = "a";
  EXPECT_TRUE(store.commit_round(round, {&result, 1}, CheckpointRef{"/c/round-1.fcp", 10, 1, "f"}));
  return run->id;
}

RoundRecord round_two(std::int64_t run_id) {
  RoundRecord round;
  round.run_id = run_id;
  round.round = 2;
  round.selected = 1;
  round.accepted = 1;
  return round;
}

// Nothing of round 2: last_round, the rounds, the client results and the checkpoints are
// those of round 1.
void expect_only_round_one(HistoryStore& store, std::int64_t run_id) {
  auto run = store.get_run(run_id);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->last_round, 1);
  auto rounds = store.list_rounds(run_id);
  ASSERT_TRUE(rounds);
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ(rounds->front().round, 1);
  auto paths = store.referenced_checkpoint_paths();
  ASSERT_TRUE(paths);
  EXPECT_EQ(*paths, std::vector<std::string>{"/c/round-1.fcp"});
}

TEST(StoreOnAFullDisk, ARefusedCommitLeavesNoTraceAndTheSameRoundCommitsLater) {
  TempDir dir;
  FaultVfs vfs;
  auto store = HistoryStore::open(dir.path("h.db"));
  ASSERT_TRUE(store) << store.error().message;
  const auto id = run_with_one_round(*store);
  ClientResult result;
  result.client_id = "a";
  const CheckpointRef ref{"/c/round-2.fcp", 10, 2, "f"};

  vfs.fail_writes(SQLITE_FULL);
  auto refused = store->commit_round(round_two(id), {&result, 1}, ref);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::io_error);
  EXPECT_TRUE(contains(refused.error().message, "cannot commit round 2 of run 1"))
      << refused.error().message;
  EXPECT_TRUE(contains(refused.error().message, "database or disk is full"))
      << refused.error().message;
  EXPECT_GT(vfs.refused(), 0);
  // Reads still work on a full disk; writes keep failing the same way.
  expect_only_round_one(*store, id);
  auto state = store->set_run_state(id, RunState::paused, "disk full", 2000);
  ASSERT_FALSE(state);
  EXPECT_EQ(state.error().code, errc::io_error);

  vfs.heal();
  auto committed = store->commit_round(round_two(id), {&result, 1}, ref);
  ASSERT_TRUE(committed) << committed.error().message;
  EXPECT_EQ(committed->attempt, 1) << "the refused attempt left no row";
  auto intact = store->integrity_check();
  ASSERT_TRUE(intact);
  EXPECT_TRUE(*intact);
}

TEST(StoreOnAFullDisk, AFailedSyncIsAnIoErrorAndTheRoundIsNotVisible) {
  TempDir dir;
  FaultVfs vfs;
  auto store = HistoryStore::open(dir.path("h.db"));
  ASSERT_TRUE(store) << store.error().message;
  const auto id = run_with_one_round(*store);
  ClientResult result;
  result.client_id = "a";

  vfs.fail_syncs(SQLITE_IOERR_FSYNC);
  auto refused = store->commit_round(round_two(id), {&result, 1}, std::nullopt);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::io_error);
  EXPECT_TRUE(contains(refused.error().message, "disk I/O error")) << refused.error().message;
  expect_only_round_one(*store, id);

  vfs.heal();
  ASSERT_TRUE(store->commit_round(round_two(id), {&result, 1}, std::nullopt));
  auto run = store->get_run(id);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->last_round, 2);
}

}  // namespace
}  // namespace fedcore::store
