// GradientReducer: averages a LayerStack's gradients over the data-parallel group in
// buckets, overlapping the allreduces with backward.
//
// Buckets are runs of consecutive layers, collected from the last layer backwards until
// a bucket holds at least `bucket_bytes` of gradients (PyTorch DDP's scheme: the output
// side's gradients are ready first). With `overlap`, a communication thread allreduces a
// bucket as soon as backward reports its lowest layer done (layer_done, from
// LayerStack::backward's hook) while the compute thread goes on with earlier layers;
// finish() waits for the rest. Without it, finish() reduces every bucket itself.
//
// Every rank's buckets are the same (same model, same bucket_bytes) and are reduced in
// the same order, so the communicator's sequence numbers agree.
//
// Thread safety: layer_done and finish are called by the one compute thread. While a
// step is in flight (first layer_done to finish) the communicator belongs to the
// communication thread; between steps the compute thread may use it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "distributed/layer_stack.hpp"
#include "shared/collective/collectives.hpp"

namespace fedcore::distributed {

struct ReducerOptions {
  std::size_t bucket_bytes = std::size_t{4} << 20;
  bool overlap = true;
  std::chrono::milliseconds timeout{0};  // per allreduce; 0 = communicator default
};

class GradientReducer {
 public:
  GradientReducer(collective::Communicator& comm, LayerStack& stack, ReducerOptions options);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  std::size_t bucket_count() const noexcept { return buckets_.size(); }
  void layer_done(std::size_t layer);
  // Waits until every bucket of this step is averaged. Errors: the first allreduce error
  // (then the communicator is dead).
  result<void> finish();

 private:
  result<void> reduce(std::size_t bucket);
  void run();

  collective::Communicator& comm_;
  LayerStack& stack_;
  ReducerOptions options_;
  struct Bucket {
    std::size_t begin = 0;  // element range in stack_.grads()
    std::size_t size = 0;
  };
  std::vector<Bucket> buckets_;         // in reduction order (output side first)
  std::vector<int> ready_after_layer_;  // bucket index that layer i completes, or -1
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t ready_ = 0;       // guarded by mutex_
  std::size_t done_ = 0;        // guarded by mutex_
  bool stop_ = false;           // guarded by mutex_
  std::optional<error> error_;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace fedcore::distributed
