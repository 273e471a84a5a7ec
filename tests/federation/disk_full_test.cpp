// Issue 19, disk full and read-only database, on real file systems: the run controller
// with the real disks (store::probe_directory, model::write_file_atomically) and a real
// SQLite history on
//   - a tmpfs of a few MiB filled to the last page (the checkpoint refused; the database
//     refused while the checkpoints live elsewhere),
//   - a checkpoint folder bind-mounted read-only under the running controller,
//   - an ext4 image on a loop device that the kernel remounts read-only after an error
//     (errors=remount-ro), as it does when a disk fails; repaired and remounted, a
//     restarted controller resumes the run.
// Everything is mounted in a private mount namespace (tests/mount_namespace.hpp: root, or
// an unprivileged user namespace for tmpfs and bind mounts; the ext4 case needs root). The
// probes' schedule runs on a ManualClock.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "server/store/sqlite.hpp"
#include "tests/federation/storage_rig.hpp"
#include "tests/mount_namespace.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::federation {
namespace {

using namespace std::chrono_literals;
using fedcore::testing::Mount;
using fedcore::testing::TempDir;
using testing::StorageRig;

constexpr StorageRetry kRetry{2s, 16s, 1 << 20};
constexpr std::uint64_t kTmpfsBytes = 4 << 20;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Starts a 3-round run and commits its first round.
std::int64_t start_and_commit_round_one(StorageRig& rig) {
  auto id = rig.controller->start_run(testing::storage_test_run(3));
  EXPECT_TRUE(id) << id.error().message;
  rig.controller->poll();
  rig.answer_round();
  EXPECT_EQ(rig.committed, (std::vector<std::int64_t>{1}));
  return id ? *id : 0;
}

// Empties the WAL into the database file and truncates it to zero bytes, so that the next
// commit needs new blocks (a WAL that once grew would otherwise take a few more commits
// in place on a full disk).
void truncate_wal(const std::string& db) {
  auto other = store::Database::open(db, store::OpenMode::read_write);
  ASSERT_TRUE(other) << other.error().message;
  ASSERT_TRUE(other->exec("PRAGMA wal_checkpoint(TRUNCATE)"));
}

// Finishes the run's last two rounds and checks the history: rounds 1..3 once each, every
// checkpoint complete, no temporary file, the database intact.
void finish_and_verify(StorageRig& rig, std::int64_t id) {
  ASSERT_TRUE(rig.controller->run_active());
  ASSERT_EQ(rig.clients.pending.size(), 2u);
  EXPECT_EQ(rig.clients.pending.begin()->second.request.round, 2);
  rig.answer_round();
  rig.answer_round();
  EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(rig.run(id).state, store::RunState::finished);
  EXPECT_EQ(rig.verify_checkpoints(id), 3u);
  EXPECT_TRUE(rig.temp_files().empty());
  auto intact = rig.store->integrity_check();
  ASSERT_TRUE(intact);
  EXPECT_TRUE(*intact);
}

TEST(RealDisk, AFullTmpfsRefusesTheCheckpointAndFreeingSpaceResumesTheRun) {
  TempDir dir;
  FEDCORE_REQUIRE_MOUNTS(fedcore::testing::enter_mount_namespace());
  const auto data = dir.path("data");
  std::filesystem::create_directories(data);
  auto tmpfs = fedcore::testing::mount_tmpfs(data, kTmpfsBytes);
  ASSERT_TRUE(tmpfs) << tmpfs.error().message;
  {
    StorageRig rig(data + "/history.db", data + "/ckpt", nullptr, kRetry);
    const auto id = start_and_commit_round_one(rig);
    truncate_wal(data + "/history.db");
    auto filled = fedcore::testing::fill_disk(data);
    ASSERT_TRUE(filled) << filled.error().message;
    EXPECT_GT(*filled, 2u << 20);

    rig.answer_round();  // round 2's checkpoint: ENOSPC

    const auto& hold = rig.controller->storage_hold();
    ASSERT_TRUE(hold.has_value());
    EXPECT_EQ(hold->kind, StorageFaultKind::disk_full);
    EXPECT_EQ(hold->reason, "disk full: cannot write '" + data +
                                "/ckpt/run-1/round-2.fcp.tmp': No space left on device");
    EXPECT_TRUE(rig.temp_files().empty()) << "the refused write left its temporary file";
    EXPECT_FALSE(std::filesystem::exists(data + "/ckpt/run-1/round-2.fcp"));
    // The database has no room for the pause either: it still says running, with round 1.
    EXPECT_FALSE(hold->recorded);
    EXPECT_EQ(rig.run(id).state, store::RunState::running);
    EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1}));
    EXPECT_EQ(rig.verify_checkpoints(id), 1u);
    EXPECT_FALSE(rig.controller->run_active());

    rig.advance(2s);  // still full
    ASSERT_TRUE(hold.has_value());
    EXPECT_EQ(hold->probes, 1);
    EXPECT_TRUE(contains(hold->last_probe_error, "No space left on device"))
        << hold->last_probe_error;

    std::filesystem::remove(data + "/filler");
    rig.advance(4s);
    EXPECT_FALSE(hold.has_value());
    finish_and_verify(rig, id);
  }
  EXPECT_TRUE(tmpfs->unmount());
}

TEST(RealDisk, AFullDatabaseDiskRefusesTheCommitAndTheRoundIsRedoneWhenSpaceIsBack) {
  TempDir dir;
  FEDCORE_REQUIRE_MOUNTS(fedcore::testing::enter_mount_namespace());
  const auto data = dir.path("db");
  std::filesystem::create_directories(data);
  auto tmpfs = fedcore::testing::mount_tmpfs(data, kTmpfsBytes);
  ASSERT_TRUE(tmpfs) << tmpfs.error().message;
  {
    // The checkpoints on the ordinary temp folder, the history on the small tmpfs.
    StorageRig rig(data + "/history.db", dir.path("ckpt"), nullptr, kRetry);
    const auto id = start_and_commit_round_one(rig);
    truncate_wal(data + "/history.db");
    ASSERT_TRUE(fedcore::testing::fill_disk(data));

    rig.answer_round();  // round 2: the file is written, the commit refused (SQLITE_FULL)

    const auto& hold = rig.controller->storage_hold();
    ASSERT_TRUE(hold.has_value());
    EXPECT_EQ(hold->kind, StorageFaultKind::disk_full);
    EXPECT_TRUE(hold->reason.starts_with("disk full: database '" + data + "/history.db'"))
        << hold->reason;
    EXPECT_TRUE(contains(hold->reason, "database or disk is full")) << hold->reason;
    EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1}));
    auto referenced = rig.store->referenced_checkpoint_paths();
    ASSERT_TRUE(referenced);
    EXPECT_EQ(referenced->size(), 1u) << "round 2's file exists but no row names it";

    std::filesystem::remove(data + "/filler");
    rig.advance(2s);
    EXPECT_FALSE(hold.has_value());
    finish_and_verify(rig, id);
  }
  EXPECT_TRUE(tmpfs->unmount());
}

TEST(RealDisk, AReadOnlyCheckpointFolderPausesTheRunUntilItIsWritableAgain) {
  TempDir dir;
  FEDCORE_REQUIRE_MOUNTS(fedcore::testing::enter_mount_namespace());
  StorageRig rig(dir.path("history.db"), dir.path("ckpt"), nullptr, kRetry);
  const auto id = start_and_commit_round_one(rig);
  // Root ignores permission bits: only a read-only mount makes the folder refuse root.
  auto read_only = fedcore::testing::bind_read_only(dir.path("ckpt"));
  ASSERT_TRUE(read_only) << read_only.error().message;

  rig.answer_round();
  const auto& hold = rig.controller->storage_hold();
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->kind, StorageFaultKind::read_only);
  EXPECT_EQ(hold->reason, "read-only storage: cannot create '" + dir.path("ckpt") +
                              "/run-1/round-2.fcp.tmp': Read-only file system");
  EXPECT_TRUE(hold->recorded) << "the database is on another, writable folder";
  EXPECT_EQ(rig.run(id).state, store::RunState::paused);
  EXPECT_EQ(rig.run(id).error, hold->reason);

  rig.advance(2s);
  ASSERT_TRUE(hold.has_value());
  EXPECT_TRUE(contains(hold->last_probe_error, "Read-only file system")) << hold->last_probe_error;
  ASSERT_TRUE(read_only->unmount());
  rig.advance(4s);
  EXPECT_FALSE(hold.has_value());
  finish_and_verify(rig, id);
}

// "/dev/loop3" for the file system mounted on `dir`, from /proc/self/mounts.
std::string device_of(const std::string& dir) {
  std::ifstream mounts("/proc/self/mounts");
  std::string device, point, rest;
  while (mounts >> device >> point && std::getline(mounts, rest)) {
    if (point == dir) {
      return device;
    }
  }
  return "";
}

result<void> ext4_tools_and_root() {
  if (!fedcore::testing::real_root()) {
    return fail(errc::permission_denied, "a loop device needs root");
  }
  if (!fedcore::testing::run_command("command -v mkfs.ext4 e2fsck >/dev/null")) {
    return fail(errc::not_found, "mkfs.ext4 and e2fsck (e2fsprogs) are not installed");
  }
  return fedcore::testing::enter_mount_namespace();
}

TEST(RealDisk, AFileSystemRemountedReadOnlyByTheKernelHoldsTheRunAndARestartResumesIt) {
  TempDir dir;
  FEDCORE_REQUIRE_MOUNTS(ext4_tools_and_root());
  const auto image = dir.path("disk.img");
  const auto data = dir.path("data");
  std::filesystem::create_directories(data);
  std::ofstream(image).close();
  std::filesystem::resize_file(image, 16 << 20);
  ASSERT_TRUE(fedcore::testing::run_command("mkfs.ext4 -q -F " + image));
  const auto mount_image = "mount -o loop,errors=remount-ro " + image + " " + data;
  ASSERT_TRUE(fedcore::testing::run_command(mount_image));
  Mount mounted(data);
  std::int64_t id = 0;
  {
    StorageRig rig(data + "/history.db", data + "/ckpt", nullptr, kRetry);
    id = start_and_commit_round_one(rig);
    // What ext4 does on a metadata error with errors=remount-ro: the file system turns
    // read-only under the open files.
    const auto device = device_of(data);
    ASSERT_TRUE(device.starts_with("/dev/")) << device;
    {
      std::ofstream trigger("/sys/fs/ext4/" + device.substr(5) + "/trigger_fs_error");
      trigger << "fedcore disk_full_test\n";
      ASSERT_TRUE(trigger.flush()) << "cannot trigger an ext4 error on " << device;
    }
    rig.answer_round();

    const auto& hold = rig.controller->storage_hold();
    ASSERT_TRUE(hold.has_value());
    EXPECT_EQ(hold->kind, StorageFaultKind::read_only);
    EXPECT_EQ(hold->reason, "read-only storage: cannot create '" + data +
                                "/ckpt/run-1/round-2.fcp.tmp': Read-only file system");
    EXPECT_FALSE(hold->recorded) << "the database is on the same read-only file system";
    EXPECT_EQ(rig.run(id).state, store::RunState::running);
    EXPECT_EQ(rig.committed_rounds(id), (std::vector<std::int64_t>{1}));
    // Probes keep failing, once per interval, and the run stays paused.
    rig.advance(2s);
    rig.advance(4s);
    ASSERT_TRUE(hold.has_value());
    EXPECT_EQ(hold->probes, 2);
    EXPECT_FALSE(rig.controller->run_active());
    rig.controller->shutdown();
  }
  // The operator repairs the file system and restarts the server.
  ASSERT_TRUE(mounted.unmount());
  EXPECT_TRUE(fedcore::testing::run_command("e2fsck -fy " + image +
                                            " >/dev/null 2>&1 ; "
                                            "test $? -le 2"));
  ASSERT_TRUE(fedcore::testing::run_command(mount_image));
  mounted = Mount(data);
  {
    StorageRig rig(data + "/history.db", data + "/ckpt", nullptr, kRetry);
    ASSERT_TRUE(rig.controller->resume_runs());
    rig.controller->poll();
    finish_and_verify(rig, id);
  }
}

}  // namespace
}  // namespace fedcore::federation
