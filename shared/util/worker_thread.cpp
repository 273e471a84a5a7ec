#include "shared/util/worker_thread.hpp"

#include <utility>

namespace fedcore {

WorkerThread::WorkerThread(std::function<void()> after_each)
    : after_each_(std::move(after_each)), thread_([this] { loop(); }) {}

WorkerThread::~WorkerThread() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void WorkerThread::submit(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(job));
  }
  work_.notify_one();
}

void WorkerThread::drain() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [this] { return queue_.empty() && running_ == 0; });
}

std::size_t WorkerThread::pending() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + running_;
}

// Queued jobs still run when the destructor asks for the thread: a job accepted is a
// job done (a checkpoint write must not vanish because the server is shutting down).
void WorkerThread::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_.wait(lock, [this] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) {
      return;  // closing, and nothing left
    }
    auto job = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    job();
    if (after_each_) {
      after_each_();
    }
    lock.lock();
    --running_;
    idle_.notify_all();
  }
}

}  // namespace fedcore
