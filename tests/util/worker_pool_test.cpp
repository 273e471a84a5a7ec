// WorkerPool: parallel_for runs every piece exactly once, on several threads, and returns
// only when all are done; posted jobs run on the pool's threads; the destructor runs what
// is still queued; CPU time is counted.
#include "shared/util/worker_pool.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace fedcore {
namespace {

TEST(WorkerPool, ParallelForRunsEveryPieceOnceAndReturnsWhenAllAreDone) {
  WorkerPool pool(3);
  constexpr std::size_t kCount = 1003, kGrain = 10;
  std::vector<std::atomic<int>> seen(kCount);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  pool.parallel_for(kCount, kGrain, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      seen[i].fetch_add(1);
    }
    std::lock_guard lock(mutex);
    threads.insert(std::this_thread::get_id());
    pieces.emplace_back(begin, end);
  });
  for (std::size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(seen[i].load(), 1) << i;
  }
  ASSERT_EQ(pieces.size(), 101u);
  for (const auto& [begin, end] : pieces) {
    EXPECT_EQ(begin % kGrain, 0u);
    EXPECT_EQ(end, std::min(begin + kGrain, kCount));
  }
  EXPECT_GE(threads.size(), 1u);
  EXPECT_LE(threads.size(), 4u);  // the caller and the pool's three
}

// The caller takes pieces too: with every pool thread blocked, parallel_for still finishes.
TEST(WorkerPool, TheCallerWorksThroughThePiecesWhenThePoolIsBusy) {
  WorkerPool pool(1);
  std::mutex mutex;
  std::condition_variable cv;
  bool release = false, blocked = false;
  pool.post([&] {
    std::unique_lock lock(mutex);
    blocked = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return blocked; }));
  }
  std::size_t sum = 0;
  std::set<std::thread::id> threads;
  pool.parallel_for(100, 7, [&](std::size_t begin, std::size_t end) {
    threads.insert(std::this_thread::get_id());
    for (std::size_t i = begin; i < end; ++i) {
      sum += i;
    }
  });
  EXPECT_EQ(sum, 4950u);
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
  {
    std::lock_guard lock(mutex);
    release = true;
  }
  cv.notify_all();
}

TEST(WorkerPool, PostedJobsRunOnThePoolAndTheDestructorRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  std::atomic<bool> on_pool{true};
  {
    WorkerPool pool(2);
    EXPECT_EQ(pool.size(), 2u);
    EXPECT_FALSE(pool.on_pool_thread());
    for (int i = 0; i < 50; ++i) {
      pool.post([&] {
        if (!pool.on_pool_thread()) {
          on_pool = false;
        }
        ++ran;
      });
    }
  }
  EXPECT_EQ(ran.load(), 50);
  EXPECT_TRUE(on_pool.load());
}

TEST(WorkerPool, CountsItsThreadsCpuTime) {
  WorkerPool pool(1);
  const double before = pool.cpu_seconds();
  std::atomic<bool> done{false};
  pool.post([&] {
    // Spin for 30 ms of thread CPU time.
    timespec start{}, now{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    do {
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < 30000000L);
    done = true;
  });
  for (int i = 0; i < 10000 && !done; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(done.load());
  EXPECT_GE(pool.cpu_seconds() - before, 0.029);
}

}  // namespace
}  // namespace fedcore
