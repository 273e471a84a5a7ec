#include "shared/util/worker_thread.hpp"

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace fedcore {
namespace {

TEST(WorkerThread, RunsJobsInOrderOffTheCallersThread) {
  std::vector<int> order;  // written by the worker only; read after drain()
  std::vector<std::thread::id> threads;
  WorkerThread worker;
  for (int i = 0; i < 50; ++i) {
    worker.submit([&, i] {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
  }
  worker.drain();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
    EXPECT_NE(threads[static_cast<std::size_t>(i)], std::this_thread::get_id());
  }
  EXPECT_EQ(worker.pending(), 0u);
}

TEST(WorkerThread, DrainWaitsForTheRunningJobAndItsAfterEach) {
  std::promise<void> release;
  auto released = release.get_future().share();
  std::atomic<int> after{0};
  std::atomic<bool> finished{false};
  WorkerThread worker([&] { after.fetch_add(1); });
  worker.submit([&, released] {
    released.wait();
    finished = true;
  });
  EXPECT_EQ(worker.pending(), 1u);
  std::thread releaser([&] { release.set_value(); });
  worker.drain();
  EXPECT_TRUE(finished.load());
  EXPECT_EQ(after.load(), 1);
  EXPECT_EQ(worker.pending(), 0u);
  releaser.join();
}

TEST(WorkerThread, TheDestructorRunsWhatIsStillQueued) {
  std::atomic<int> ran{0};
  std::promise<void> release;
  auto released = release.get_future().share();
  {
    WorkerThread worker;
    worker.submit([released] { released.wait(); });
    for (int i = 0; i < 5; ++i) {
      worker.submit([&] { ran.fetch_add(1); });
    }
    release.set_value();
  }
  EXPECT_EQ(ran.load(), 5);
}

}  // namespace
}  // namespace fedcore
