// Crash safety: a child process commits rounds (and writes their checkpoint files) as
// fast as it can and is SIGKILLed at a random point; the history it leaves must be whole.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <poll.h>
#include <set>
#include <signal.h>
#include <string>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "server/store/history_store.hpp"
#include "shared/model/param_io.hpp"
#include "shared/util/checksum.hpp"
#include "shared/util/rng.hpp"
#include "tests/store/store_fixtures.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::store {
namespace {

namespace fs = std::filesystem;

constexpr int kClients = 3;
constexpr int kIterations = 10;
constexpr auto kReportTimeout = std::chrono::seconds(60);

std::string client_id(int i) {
  return "client-" + std::to_string(i);
}

std::string checkpoint_path(const std::string& dir, std::int64_t round) {
  return dir + "/round-" + std::to_string(round) + ".ckpt";
}

// Checkpoint contents are a function of the round, so the parent can tell a torn or
// mismatched file from the right one.
std::vector<std::byte> checkpoint_bytes(std::int64_t round) {
  Rng rng(static_cast<std::uint64_t>(round));
  std::vector<std::byte> bytes(2048 + rng.below(16384));
  for (auto& b : bytes) {
    b = static_cast<std::byte>(rng.next_u64());
  }
  return bytes;
}

std::vector<ClientResult> results_for(std::int64_t round) {
  std::vector<ClientResult> results;
  for (int i = 0; i < kClients; ++i) {
    results.push_back(testing::make_result(client_id(i), round * 10 + i));
  }
  return results;
}

bool write_report(int fd, std::int64_t value) {
  // 8 bytes is below PIPE_BUF, so each report arrives whole.
  return ::write(fd, &value, sizeof value) == static_cast<ssize_t>(sizeof value);
}

// The child: commits rounds last_round + 1, + 2, ... until killed, reporting each round
// number on `fd` after its commit returned. Reports -1 and exits on any error. Never
// returns: GoogleTest belongs to the parent.
[[noreturn]] void committing_child(int fd, const std::string& db_path, const std::string& dir,
                                   std::int64_t run_id, pid_t parent) {
  // Should the test process die without killing us, die with it rather than commit
  // forever. (The check after prctl closes the race with a parent that is already gone.)
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) {
    ::_exit(3);
  }
  try {
    auto store = HistoryStore::open(db_path);
    if (!store) {
      write_report(fd, -1);
      ::_exit(1);
    }
    auto run = store->get_run(run_id);
    if (!run) {
      write_report(fd, -1);
      ::_exit(1);
    }
    for (std::int64_t round = run->last_round + 1;; ++round) {
      const auto bytes = checkpoint_bytes(round);
      const auto path = checkpoint_path(dir, round);
      if (!model::write_file_atomically(path, bytes)) {
        write_report(fd, -1);
        ::_exit(1);
      }
      const CheckpointRef ref{path, static_cast<std::int64_t>(bytes.size()), crc32(bytes),
                              "00000000deadbeef"};
      const auto results = results_for(round);
      if (!store->commit_round(testing::make_round(run_id, round), results, ref)) {
        write_report(fd, -1);
        ::_exit(1);
      }
      if (!write_report(fd, round)) {
        ::_exit(1);
      }
    }
  } catch (...) {
    ::_exit(2);
  }
}

// Kills and reaps the child on every way out of the test, including a failed ASSERT.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { kill_and_reap(); }

  // Returns the wait status (or -1 if already reaped).
  int kill_and_reap() {
    if (pid_ <= 0) {
      return -1;
    }
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
};

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads one report, waiting at most kReportTimeout. nullopt on timeout or end of pipe.
std::optional<std::int64_t> read_report(int fd) {
  std::int64_t value = 0;
  std::size_t got = 0;
  while (got < sizeof value) {
    pollfd p{fd, POLLIN, 0};
    const int ready =
        ::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kReportTimeout).count()));
    if (ready < 0 && errno == EINTR) {
      continue;
    }
    if (ready <= 0) {
      return std::nullopt;
    }
    const ssize_t n = ::read(fd, reinterpret_cast<char*>(&value) + got, sizeof value - got);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return std::nullopt;
    }
    got += static_cast<std::size_t>(n);
  }
  return value;
}

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

// The whole-history check after a kill. Returns last_round (-1 if the store won't open).
std::int64_t verify_history(const std::string& db_path, std::int64_t run_id,
                            std::int64_t reported) {
  auto store = HistoryStore::open(db_path);
  EXPECT_TRUE(store) << store.error().to_string();
  if (!store) {
    return -1;
  }
  auto intact = store->integrity_check();
  EXPECT_TRUE(intact && *intact);

  const std::int64_t last_round = store->get_run(run_id)->last_round;
  // Every round the child saw committed is durable.
  EXPECT_GE(last_round, reported);

  // Rounds are exactly 1..last_round: no gap, no duplicate, no stray attempt.
  auto rounds = store->list_rounds(run_id);
  EXPECT_TRUE(rounds);
  EXPECT_EQ(static_cast<std::int64_t>(rounds->size()), last_round);
  auto checkpoints = store->list_checkpoints(run_id);
  EXPECT_TRUE(checkpoints);
  EXPECT_EQ(checkpoints->size(), rounds->size());
  for (std::size_t i = 0; i < rounds->size() && i < checkpoints->size(); ++i) {
    const auto& r = (*rounds)[i];
    const auto expected_round = static_cast<std::int64_t>(i + 1);
    EXPECT_EQ(r.round, expected_round);
    EXPECT_EQ(r.attempt, 1);
    EXPECT_EQ(r.state, RoundState::committed);

    // The client results are complete and are the ones written.
    auto results = store->list_client_results(run_id, r.round);
    EXPECT_TRUE(results);
    EXPECT_EQ(*results, results_for(r.round)) << "round " << r.round;

    // The round's checkpoint exists with the recorded size and CRC, and is the round's.
    const auto& checkpoint = (*checkpoints)[i];
    EXPECT_EQ(r.checkpoint_id, checkpoint.id);
    EXPECT_EQ(checkpoint.round, expected_round);
    const auto bytes = read_file(checkpoint.ref.path);
    EXPECT_EQ(static_cast<std::int64_t>(bytes.size()), checkpoint.ref.size_bytes)
        << checkpoint.ref.path;
    EXPECT_EQ(crc32(bytes), checkpoint.ref.crc32) << checkpoint.ref.path;
    EXPECT_TRUE(bytes == checkpoint_bytes(expected_round)) << checkpoint.ref.path;
  }
  auto latest = store->latest_checkpoint(run_id);
  EXPECT_TRUE(latest);
  if (last_round > 0) {
    EXPECT_TRUE(latest->has_value() && (*latest)->round == last_round);
  }
  return last_round;
}

// Deletes the files of `dir` no row references (what the server does at start-up) and
// returns how many there were.
int reconcile_orphans(HistoryStore& store, const std::string& dir) {
  auto referenced = store.referenced_checkpoint_paths();
  EXPECT_TRUE(referenced);
  const std::set<std::string> keep(referenced->begin(), referenced->end());
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (keep.count(entry.path().string()) == 0) {
      fs::remove(entry.path());
      ++removed;
    }
  }
  return removed;
}

TEST(HistoryCrash, SigkillWhileCommittingLeavesAWholeHistory) {
  fedcore::testing::TempDir temp;
  const std::string db_path = temp.path("history.db");
  const std::string dir = temp.path("checkpoints");
  fs::create_directories(dir);

  std::int64_t run_id = 0;
  {
    auto store = HistoryStore::open(db_path);
    ASSERT_TRUE(store) << store.error().to_string();
    for (int i = 0; i < kClients; ++i) {
      ASSERT_TRUE(store->upsert_client(testing::make_client(client_id(i))));
    }
    auto run = store->create_run("crash", "{}", 1'000'000'000, 1);
    ASSERT_TRUE(run);
    run_id = run->id;
    ASSERT_TRUE(store->set_run_state(run_id, RunState::running, "", 2));
  }  // closed before any fork: an SQLite connection must not cross fork()

  Rng rng(20240611);
  std::int64_t previous_last = 0;
  int orphans_removed = 0;
  for (int iteration = 0; iteration < kIterations; ++iteration) {
    // Kill after k reports, plus a random fraction of the time the last round took, so
    // the kill lands anywhere in the next checkpoint write or commit.
    const auto k = static_cast<int>(2 + rng.below(7));
    const double fraction = rng.uniform_double();
    SCOPED_TRACE("iteration " + std::to_string(iteration) + ": kill after " + std::to_string(k) +
                 " reports and " + std::to_string(fraction) + " of a round");

    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      committing_child(fds[1], db_path, dir, run_id, parent);
    }
    ::close(fds[1]);
    Fd reports(fds[0]);
    ASSERT_GT(pid, 0) << "fork failed";
    Child child(pid);

    std::int64_t reported = previous_last;
    auto last_report = std::chrono::steady_clock::now();
    auto round_time = std::chrono::steady_clock::duration::zero();
    for (int i = 0; i < k; ++i) {
      auto report = read_report(reports.get());
      ASSERT_TRUE(report.has_value()) << "the child stopped reporting";
      ASSERT_GT(*report, 0) << "the child failed";
      EXPECT_EQ(*report, reported + 1);
      reported = *report;
      const auto now = std::chrono::steady_clock::now();
      round_time = now - last_report;
      last_report = now;
    }
    std::this_thread::sleep_for(
        std::chrono::duration_cast<std::chrono::microseconds>(round_time * fraction));
    const int status = child.kill_and_reap();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
    // Reports that were in flight when the kill landed still count.
    while (auto report = read_report(reports.get())) {
      ASSERT_GT(*report, 0) << "the child failed";
      reported = *report;
    }

    const std::int64_t last_round = verify_history(db_path, run_id, reported);
    ASSERT_GE(last_round, previous_last + k);
    {
      // Start-up reconciliation: afterwards the directory holds exactly the referenced
      // files.
      auto store = HistoryStore::open(db_path);
      ASSERT_TRUE(store);
      orphans_removed += reconcile_orphans(*store, dir);
      auto paths = store->referenced_checkpoint_paths();
      ASSERT_TRUE(paths);
      std::vector<std::string> files;
      for (const auto& entry : fs::directory_iterator(dir)) {
        files.push_back(entry.path().string());
      }
      std::sort(files.begin(), files.end());
      EXPECT_EQ(files, *paths);
      EXPECT_EQ(static_cast<std::int64_t>(files.size()), last_round);
    }
    previous_last = last_round;
  }
  // Informational: how often the kill fell between a checkpoint write and its commit.
  std::cout << "[ crash    ] " << kIterations << " kills, " << previous_last
            << " rounds committed, " << orphans_removed << " orphan files removed\n";
}

}  // namespace
}  // namespace fedcore::store
