// Issue 19, disk full and read-only database, at the run controller's seams: checkpoint
// files and storage probes through injected Disks, the history through an SQLite VFS that
// refuses writes (tests/store/fault_vfs.hpp). A ManualClock drives the probes' schedule.
// The same behaviour on real file systems that fill up and go read-only is in
// disk_full_test.cpp.
#include "server/federation/storage_fault.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "tests/federation/storage_rig.hpp"
#include "tests/store/fault_vfs.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::federation {
namespace {

using namespace std::chrono_literals;
using fedcore::testing::TempDir;
using store::testing::FaultVfs;
using testing::kDiskFull;
using testing::kReadOnly;
using testing::StorageRig;
using testing::SwitchableDisks;

constexpr StorageRetry kRetry{2s, 16s, 1 << 20};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(StorageFault, KindsNamesAndReasons) {
  EXPECT_EQ(storage_fault_kind(errc::resource_exhausted), StorageFaultKind::disk_full);
  EXPECT_EQ(storage_fault_kind(errc::permission_denied), StorageFaultKind::read_only);
  EXPECT_EQ(storage_fault_kind(errc::io_error), StorageFaultKind::io_error);
  EXPECT_EQ(storage_fault_text(StorageFaultKind::disk_full), "disk full");
  EXPECT_EQ(storage_fault_code(StorageFaultKind::read_only), "read_only");
  EXPECT_EQ(storage_fault_of_reason("disk full: cannot write 'x': No space left on device"),
            StorageFaultKind::disk_full);
  EXPECT_EQ(storage_fault_of_reason("read-only storage: database 'h.db': ..."),
            StorageFaultKind::read_only);
  EXPECT_EQ(storage_fault_of_reason("storage error: EIO"), StorageFaultKind::io_error);
  EXPECT_EQ(storage_fault_of_reason("paused by an admin"), std::nullopt);
  EXPECT_EQ(storage_fault_of_reason("disk full"), std::nullopt);
  EXPECT_TRUE(is_storage_failure({errc::io_error, ""}));
  EXPECT_TRUE(is_storage_failure({errc::permission_denied, ""}));
  EXPECT_FALSE(is_storage_failure({errc::unavailable, "database is locked"}));
  EXPECT_FALSE(is_storage_failure({errc::failed_precondition, "round 3 is not last_round + 1"}));
}

TEST(StorageFault, ARefusedCheckpointPausesTheRunRecordsNothingAndTheProbeResumesIt) {
  TempDir dir;
  SwitchableDisks disks;
  StorageRig rig(dir.path("history.db"), dir.path("ckpt"), &disks, kRetry);
  auto id = rig.controller->start_run(testing::storage_test_run(3));
  ASSERT_TRUE(id) << id.error().message;
  rig.controller->poll();
  rig.answer_round();
  ASSERT_EQ(rig.committed, (std::vector<std::int64_t>{1}));
  const auto params = rig.clients.pending.at("a").global->size();

  disks.refuse(kDiskFull);
  rig.answer_round();  // round 2: the checkpoint file is refused

  EXPECT_FALSE(rig.controller->run_active());
  const auto& hold = rig.controller->storage_hold();
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->run_id, *id);
  EXPECT_EQ(hold->after_round, 1);
  EXPECT_EQ(hold->kind, StorageFaultKind::disk_full);
  EXPECT_EQ(hold->reason, "disk full: cannot write '" + dir.path("ckpt") +
                              "/run-1/round-2.fcp.tmp': No space left on device");
  EXPECT_TRUE(hold->recorded);
  EXPECT_EQ(hold->reserve_bytes, kRetry.margin_bytes + params * sizeof(float));
  // The history: paused with the same reason, round 1 only, one checkpoint.
  const auto run = rig.run(*id);
  EXPECT_EQ(run.state, store::RunState::paused);
  EXPECT_EQ(run.error, hold->reason);
  EXPECT_EQ(run.last_round, 1);
  EXPECT_EQ(rig.committed_rounds(*id), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(rig.verify_checkpoints(*id), 1u);
  EXPECT_EQ(rig.events.count("storage_fault"), 1u);
  EXPECT_EQ(rig.controller->next_wakeup(), rig.clock.steady() + 2s);

  // Not before its time; then a probe that fails doubles the interval.
  const int probes_at_fault = disks.probes;
  rig.advance(1999ms);
  EXPECT_EQ(disks.probes, probes_at_fault);
  rig.advance(1ms);
  EXPECT_EQ(disks.probes, probes_at_fault + 1);
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->probes, 1);
  EXPECT_TRUE(contains(hold->last_probe_error, "No space left on device"));
  EXPECT_EQ(rig.controller->next_wakeup(), rig.clock.steady() + 4s);
  EXPECT_FALSE(rig.controller->run_active());

  // Space is back: the next probe passes and the run goes on after round 1.
  disks.refuse(std::nullopt);
  rig.advance(4s);
  EXPECT_FALSE(hold.has_value());
  ASSERT_TRUE(rig.controller->run_active());
  EXPECT_EQ(rig.run(*id).state, store::RunState::running);
  EXPECT_EQ(rig.run(*id).error, "");
  EXPECT_EQ(rig.events.count("run_resumed"), 1u);
  EXPECT_TRUE(contains(rig.events.last("run_resumed"), R"("by":"storage_probe")"));
  ASSERT_EQ(rig.clients.pending.size(), 2u);
  EXPECT_EQ(rig.clients.pending.at("a").request.round, 2);
  rig.answer_round();
  rig.answer_round();
  EXPECT_EQ(rig.committed_rounds(*id), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(rig.run(*id).state, store::RunState::finished);
  EXPECT_EQ(rig.verify_checkpoints(*id), 3u);
  EXPECT_TRUE(rig.temp_files().empty());
}

// Starts a 3-round run on `rig` and commits its first round; returns the run id.
std::int64_t start_and_commit_round_one(StorageRig& rig) {
  auto id = rig.controller->start_run(testing::storage_test_run(3));
  EXPECT_TRUE(id) << id.error().message;
  rig.controller->poll();
  rig.answer_round();
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1}));
  return id ? *id : 0;
}

TEST(StorageFault, SqliteFullOnTheCommitHoldsTheRunEvenWhenThePauseCannotBeRecorded) {
  TempDir dir;
  FaultVfs vfs;  // before the store: its connection goes through the VFS
  SwitchableDisks disks;
  StorageRig rig(dir.path("history.db"), dir.path("ckpt"), &disks, kRetry);
  const auto id = start_and_commit_round_one(rig);

  // The database's disk is full; the checkpoint folder (elsewhere) took the file.
  vfs.fail_writes(SQLITE_FULL);
  disks.refuse_probes = kDiskFull;
  rig.answer_round();  // round 2: the file is written, the transaction refused

  const auto& hold = rig.controller->storage_hold();
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->kind, StorageFaultKind::disk_full);
  EXPECT_TRUE(hold->reason.starts_with("disk full: database '" + dir.path("history.db") +
                                       "': cannot commit round 2 of run 1"))
      << hold->reason;
  EXPECT_TRUE(contains(hold->reason, "database or disk is full")) << hold->reason;
  EXPECT_GT(vfs.refused(), 0);
  // The pause itself could not be written: the history still says running (a restart
  // would resume the run), and nothing of round 2 is in it.
  EXPECT_FALSE(hold->recorded);
  EXPECT_EQ(rig.run(id).state, store::RunState::running);
  EXPECT_EQ(rig.run(id).last_round, 1);
  EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1}));
  auto referenced = rig.store->referenced_checkpoint_paths();
  ASSERT_TRUE(referenced);
  EXPECT_EQ(referenced->size(), 1u);
  EXPECT_TRUE(std::filesystem::exists(dir.path("ckpt") + "/run-1/round-2.fcp"))
      << "the file is written before the commit; nothing references it";
  EXPECT_FALSE(rig.controller->run_active());

  // The directories take writes again but the database does not: still held.
  disks.refuse_probes.reset();
  rig.advance(2s);
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->probes, 1);
  EXPECT_TRUE(contains(hold->last_probe_error, "database or disk is full"))
      << hold->last_probe_error;

  vfs.heal();
  rig.advance(4s);
  ASSERT_FALSE(hold.has_value());
  ASSERT_TRUE(rig.controller->run_active());
  rig.answer_round();
  rig.answer_round();
  EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(rig.verify_checkpoints(id), 3u);
  auto intact = rig.store->integrity_check();
  ASSERT_TRUE(intact);
  EXPECT_TRUE(*intact);
}

// A round that fails (no quorum by its deadline) on a full database disk: its record is
// refused like a commit, so the run is held for its storage instead of pausing for good
// (or retrying into the same wall), and runs the round again once the disk has room.
TEST(StorageFault, AFailedRoundWhoseRecordTheDiskRefusesHoldsTheRunUntilItHasRoom) {
  TempDir dir;
  FaultVfs vfs;
  SwitchableDisks disks;
  StorageRig rig(dir.path("history.db"), dir.path("ckpt"), &disks, kRetry);
  const auto id = start_and_commit_round_one(rig);

  vfs.fail_writes(SQLITE_FULL);
  disks.refuse_probes = kDiskFull;
  rig.clients.pending.clear();  // round 2's updates never come
  rig.advance(11s);             // past round_timeout_s

  const auto& hold = rig.controller->storage_hold();
  ASSERT_TRUE(hold.has_value()) << "a failed round the disk cannot record must hold the run";
  EXPECT_EQ(hold->kind, StorageFaultKind::disk_full);
  EXPECT_TRUE(hold->reason.starts_with("disk full: database '" + dir.path("history.db") + "'"))
      << hold->reason;
  EXPECT_EQ(hold->after_round, 1);
  EXPECT_FALSE(rig.controller->run_active());

  disks.refuse_probes.reset();
  vfs.heal();
  rig.advance(2s);
  ASSERT_FALSE(hold.has_value());
  ASSERT_TRUE(rig.controller->run_active());
  rig.answer_round();
  rig.answer_round();
  EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(rig.run(id).state, store::RunState::finished);
}

TEST(StorageFault, AFailedSyncOnTheCommitIsAStorageErrorAndTheRoundIsRedone) {
  TempDir dir;
  FaultVfs vfs;
  SwitchableDisks disks;
  StorageRig rig(dir.path("history.db"), dir.path("ckpt"), &disks, kRetry);
  const auto id = start_and_commit_round_one(rig);

  vfs.fail_syncs(SQLITE_IOERR_FSYNC);
  rig.answer_round();
  const auto& hold = rig.controller->storage_hold();
  ASSERT_TRUE(hold.has_value());
  // The directories take writes (the probe passes): an I/O error, not a full disk.
  EXPECT_EQ(hold->kind, StorageFaultKind::io_error);
  EXPECT_TRUE(hold->reason.starts_with("storage error: database '")) << hold->reason;
  EXPECT_EQ(rig.run(id).last_round, 1);

  vfs.heal();
  rig.advance(2s);
  ASSERT_TRUE(rig.controller->run_active());
  rig.answer_round();
  rig.answer_round();
  EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(rig.verify_checkpoints(id), 3u);
}

TEST(StorageFault, ReadOnlyStorageIsReportedAndAnAdminResumeProbesAtOnce) {
  TempDir dir;
  FaultVfs vfs;
  SwitchableDisks disks;
  StorageRig rig(dir.path("history.db"), dir.path("ckpt"), &disks, kRetry);
  const auto id = start_and_commit_round_one(rig);

  vfs.fail_writes(SQLITE_IOERR_WRITE);  // what SQLite says when the file system turned EROFS
  disks.refuse_probes = kReadOnly;
  rig.answer_round();
  const auto& hold = rig.controller->storage_hold();
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->kind, StorageFaultKind::read_only);
  EXPECT_TRUE(hold->reason.starts_with("read-only storage: database '")) << hold->reason;

  // While the storage refuses: the admin's resume probes and says why it cannot; other
  // runs cannot start; the held run is already paused.
  auto resumed = rig.controller->resume_run(id);
  ASSERT_FALSE(resumed);
  EXPECT_EQ(resumed.error().code, errc::unavailable);
  EXPECT_TRUE(contains(resumed.error().message, "Read-only file system"))
      << resumed.error().message;
  EXPECT_EQ(hold->probes, 1);
  auto other = rig.controller->start_run(testing::storage_test_run(1));
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code, errc::failed_precondition);
  EXPECT_TRUE(contains(other.error().message, "waits for its storage")) << other.error().message;
  auto paused = rig.controller->pause_run(id);
  ASSERT_FALSE(paused);
  EXPECT_EQ(paused.error().code, errc::failed_precondition);

  vfs.heal();
  disks.refuse_probes.reset();
  ASSERT_TRUE(rig.controller->resume_run(id));
  EXPECT_FALSE(hold.has_value());
  EXPECT_TRUE(rig.controller->run_active());
  EXPECT_TRUE(contains(rig.events.last("run_resumed"), R"("by":"admin")"));
  rig.controller->poll();  // as the server does after every admin call
  rig.answer_round();
  rig.answer_round();
  EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3}));
}

TEST(StorageFault, ProbesBackOffToTheirMaximumAndStayBounded) {
  TempDir dir;
  SwitchableDisks disks;
  StorageRig rig(dir.path("history.db"), dir.path("ckpt"), &disks, {2s, 60s, 1 << 20});
  start_and_commit_round_one(rig);
  disks.refuse(kDiskFull);
  rig.answer_round();
  ASSERT_TRUE(rig.controller->storage_hold());
  const int at_fault = disks.probes;
  // Ten minutes of a disk that stays full, polled every 100 ms: probes at 2, 6, 14, 30,
  // 62 s, then every 60 s (122, 182, ..., 542 s) -- 13, each a single probe of each folder.
  for (int i = 0; i < 6000; ++i) {
    rig.advance(100ms);
  }
  const auto& hold = rig.controller->storage_hold();
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->probes, 13);
  EXPECT_EQ(disks.probes - at_fault, 13);
  EXPECT_EQ(hold->interval, 60s);
  EXPECT_EQ(disks.writes, 2) << "one checkpoint committed, one refused, none retried";
}

TEST(StorageFault, StoppingAHeldRunEndsItsProbes) {
  TempDir dir;
  SwitchableDisks disks;
  StorageRig rig(dir.path("history.db"), dir.path("ckpt"), &disks, kRetry);
  const auto id = start_and_commit_round_one(rig);
  disks.refuse(kDiskFull);
  rig.answer_round();
  ASSERT_TRUE(rig.controller->storage_hold());
  ASSERT_TRUE(rig.controller->stop_run(id));
  EXPECT_FALSE(rig.controller->storage_hold());
  EXPECT_EQ(rig.controller->next_wakeup(), std::nullopt);
  EXPECT_EQ(rig.run(id).state, store::RunState::stopped);
  const int probes = disks.probes;
  rig.advance(10min);
  EXPECT_EQ(disks.probes, probes);
}

TEST(StorageFault, AfterARestartARunPausedForItsStorageIsHeldAgainAndResumes) {
  TempDir dir;
  SwitchableDisks disks;
  std::int64_t id = 0;
  {
    StorageRig first(dir.path("history.db"), dir.path("ckpt"), &disks, kRetry);
    id = start_and_commit_round_one(first);
    disks.refuse(kDiskFull);
    first.answer_round();
    ASSERT_TRUE(first.controller->storage_hold());
    ASSERT_TRUE(first.controller->storage_hold()->recorded);
    first.controller->shutdown();
  }
  // The server restarts while the disk is still full: held again, probed at once.
  StorageRig second(dir.path("history.db"), dir.path("ckpt"), &disks, kRetry);
  ASSERT_TRUE(second.controller->resume_runs());
  const auto& hold = second.controller->storage_hold();
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->run_id, id);
  EXPECT_EQ(hold->kind, StorageFaultKind::disk_full);
  EXPECT_EQ(second.controller->next_wakeup(), second.clock.steady());
  second.controller->poll();
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->probes, 1);
  disks.refuse(std::nullopt);
  second.advance(4s);
  ASSERT_TRUE(second.controller->run_active());
  EXPECT_EQ(second.clients.pending.at("b").request.round, 2);
  second.answer_round();
  second.answer_round();
  EXPECT_EQ(second.committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3}));
}

TEST(StorageFault, ACommitRefusedForAnotherReasonPausesWithoutAHold) {
  TempDir dir;
  FaultVfs vfs;
  SwitchableDisks disks;
  StorageRig rig(dir.path("history.db"), dir.path("ckpt"), &disks, kRetry);
  const auto id = start_and_commit_round_one(rig);
  // The commit's first write says the database is locked (not the disk's doing); the
  // writes after it, the pause among them, go through.
  vfs.fail_writes(SQLITE_BUSY, 1);
  rig.answer_round();
  EXPECT_FALSE(rig.controller->storage_hold());
  EXPECT_FALSE(rig.controller->run_active());
  EXPECT_EQ(rig.controller->next_wakeup(), std::nullopt);
  EXPECT_TRUE(rig.run(id).error.starts_with("cannot commit round 2: ")) << rig.run(id).error;
}

}  // namespace
}  // namespace fedcore::federation
