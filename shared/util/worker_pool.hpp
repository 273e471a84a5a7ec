// WorkerPool: a few threads that run short, CPU-bound jobs for an I/O thread.
//
// Why: the federation server serves every session on one io_context thread, so the AES-GCM
// work of a round (every update decrypted, the global model encrypted once per client) and
// the accumulation of updates ran on one core. With a pool, a TLS stream hands the bulk
// record work of a large read or write to these threads (net/tls_stream.hpp, offload_to)
// and an aggregate adds an update in chunks on several cores (parallel_for), while the
// io_context thread goes on serving other sessions.
//
// Contract: post() queues a job; jobs start in the order they were posted, several at once.
// A job must not throw (one that does terminates the process, as an exception escaping any
// thread does). The destructor runs the jobs still queued, then joins; whoever posts
// completions from a job to an io_context keeps that io_context alive until then.
//
// Thread safety: post() and parallel_for() may be called from any thread except that
// parallel_for() must not be called from a job of the same pool (its pieces could then wait
// behind the very job that waits for them).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fedcore {

class WorkerPool {
 public:
  // REQUIRES: threads >= 1.
  explicit WorkerPool(std::size_t threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  std::size_t size() const noexcept { return threads_.size(); }

  void post(std::function<void()> job);

  // Calls body(begin, end) for the pieces [0, grain), [grain, 2 grain), ... of [0, count)
  // (the last one shorter), on the calling thread and on the pool's threads at once, and
  // returns once every piece has returned. Which thread runs which piece is not fixed; the
  // pieces are. REQUIRES: grain > 0; body does not throw.
  void parallel_for(std::size_t count, std::size_t grain,
                    const std::function<void(std::size_t, std::size_t)>& body);

  // User + system CPU seconds the pool's threads have used so far (for benchmarks: the
  // server's CPU time is its io_context thread's plus this).
  double cpu_seconds() const;

  // True on one of this pool's threads.
  bool on_pool_thread() const noexcept;

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::function<void()>> queue_;
  bool closing_ = false;
  std::vector<std::thread> threads_;  // last: start once everything above exists
};

}  // namespace fedcore
