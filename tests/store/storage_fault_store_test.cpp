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

// One fsync per round, not one per update: the events a round appends (one per update)
// and its phases ask nothing of the disk; the round's commit fsyncs the log, and with it
// every row appended before. The connection is back to synchronous=FULL after each.
TEST(StoreDurability, EventsAndPhasesWaitForTheRoundCommitsFsync) {
  TempDir dir;
  FaultVfs vfs;
  auto store = HistoryStore::open(dir.path("h.db"));
  ASSERT_TRUE(store) << store.error().message;
  const auto id = run_with_one_round(*store);
  const auto before = vfs.syncs();
  EventRecord event;
  event.kind = "update_accepted";
  event.run_id = id;
  event.round = 2;
  event.client_id = "a";
  for (int i = 0; i < 32; ++i) {
    ASSERT_TRUE(store->append_event(event));
  }
  EXPECT_EQ(vfs.syncs(), before) << "appending events fsynced";

  ClientResult result;
  result.client_id = "a";
  EventRecord committed_event = event;
  committed_event.kind = "round_committed";
  auto committed =
      store->commit_round(round_two(id), {&result, 1}, std::nullopt, {}, &committed_event);
  ASSERT_TRUE(committed) << committed.error().message;
  const auto after_commit = vfs.syncs();
  EXPECT_GE(after_commit, before + 1) << "the round's commit must fsync";
  EXPECT_LE(after_commit, before + 2) << "one fsync for the round (a checkpoint may add one)";

  RoundPhases phases;
  phases.run_id = id;
  phases.round = 2;
  phases.attempt = committed->attempt;
  ASSERT_TRUE(store->record_round_phases(phases));
  EXPECT_EQ(vfs.syncs(), after_commit) << "recording phases fsynced";
  // Back at FULL: a plain write fsyncs again.
  ASSERT_TRUE(store->set_run_state(id, RunState::paused, "", 3000));
  EXPECT_GT(vfs.syncs(), after_commit);
  auto events = store->list_events(0, 100);
  ASSERT_TRUE(events);
  EXPECT_EQ(events->size(), 33u);
}

}  // namespace
}  // namespace fedcore::store
