#include "shared/util/worker_pool.hpp"

#include <atomic>
#include <ctime>
#include <memory>
#include <pthread.h>
#include <utility>

#include "shared/util/assert.hpp"

namespace fedcore {

WorkerPool::WorkerPool(std::size_t threads) {
  FEDCORE_ASSERT(threads >= 1, "WorkerPool: at least one thread");
  threads_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { loop(); });
  }
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  work_.notify_all();
  for (auto& thread : threads_) {
    thread.join();
  }
}

void WorkerPool::post(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(job));
  }
  work_.notify_one();
}

// Queued jobs still run once the destructor asks for the threads: a job may carry a
// completion someone waits for.
void WorkerPool::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_.wait(lock, [this] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) {
      return;
    }
    auto job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // whatever the job held goes now, outside the lock
    lock.lock();
  }
}

namespace {

// What the caller and the helpers of one parallel_for share. Helpers may start after the
// call returned (every piece already taken): they find no piece and leave without touching
// `body`, which by then may be gone.
struct Pieces {
  Pieces(std::size_t count, std::size_t grain,
         const std::function<void(std::size_t, std::size_t)>& body)
      : count(count), grain(grain), total((count + grain - 1) / grain), body(&body) {}
  const std::size_t count;
  const std::size_t grain;
  const std::size_t total;
  const std::function<void(std::size_t, std::size_t)>* body;
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  std::condition_variable finished;
  std::size_t done = 0;  // guarded by mutex

  // Takes and runs pieces until none is left.
  void work() {
    std::size_t ran = 0;
    for (std::size_t i = next.fetch_add(1); i < total; i = next.fetch_add(1)) {
      const std::size_t begin = i * grain;
      (*body)(begin, std::min(count, begin + grain));
      ++ran;
    }
    if (ran > 0) {
      std::lock_guard lock(mutex);
      done += ran;
      if (done == total) {
        finished.notify_all();
      }
    }
  }
};

}  // namespace

void WorkerPool::parallel_for(std::size_t count, std::size_t grain,
                              const std::function<void(std::size_t, std::size_t)>& body) {
  FEDCORE_ASSERT(grain > 0, "WorkerPool::parallel_for: grain must be positive");
  FEDCORE_ASSERT(!on_pool_thread(), "WorkerPool::parallel_for called from its own pool");
  if (count == 0) {
    return;
  }
  auto pieces = std::make_shared<Pieces>(count, grain, body);
  const std::size_t helpers = std::min(threads_.size(), pieces->total - 1);
  for (std::size_t i = 0; i < helpers; ++i) {
    post([pieces] { pieces->work(); });
  }
  pieces->work();
  std::unique_lock lock(pieces->mutex);
  pieces->finished.wait(lock, [&] { return pieces->done == pieces->total; });
}

double WorkerPool::cpu_seconds() const {
  double total = 0;
  for (const auto& thread : threads_) {
    clockid_t clock{};
    timespec used{};
    // A const_cast only because native_handle() is not const; nothing is changed.
    if (pthread_getcpuclockid(const_cast<std::thread&>(thread).native_handle(), &clock) == 0 &&
        clock_gettime(clock, &used) == 0) {
      total += static_cast<double>(used.tv_sec) + static_cast<double>(used.tv_nsec) * 1e-9;
    }
  }
  return total;
}

bool WorkerPool::on_pool_thread() const noexcept {
  const auto me = std::this_thread::get_id();
  for (const auto& thread : threads_) {
    if (thread.get_id() == me) {
      return true;
    }
  }
  return false;
}

}  // namespace fedcore
