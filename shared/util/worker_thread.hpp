// One thread that runs jobs in the order they were given, away from the caller's thread.
//
// Why: the run controller's host hands it a round's checkpoint write, so the next round
// can start while the file goes to disk (server/federation/run_controller.hpp). One
// thread, not a pool: the jobs are writes that must land in order, and they are few.
//
// Contract: `after_each` runs on the worker thread after every job (the host uses it to
// wake its own thread). A job must not throw: one that does is a bug and terminates the
// process, as an exception escaping any thread does. The destructor runs the jobs still
// queued, then joins.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace fedcore {

class WorkerThread {
 public:
  explicit WorkerThread(std::function<void()> after_each = {});
  ~WorkerThread();
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  // Queues `job`; it runs after every job submitted before it.
  void submit(std::function<void()> job);
  // Blocks until every job submitted so far has returned (and its after_each with it).
  // Must not be called from a job.
  void drain();
  // Jobs submitted and not yet returned.
  std::size_t pending() const;

 private:
  void loop();

  std::function<void()> after_each_;
  mutable std::mutex mutex_;
  std::condition_variable work_;  // a job was queued, or the destructor wants the thread back
  std::condition_variable idle_;  // a job returned
  std::deque<std::function<void()>> queue_;
  std::size_t running_ = 0;
  bool closing_ = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace fedcore
