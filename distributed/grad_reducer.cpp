#include "distributed/grad_reducer.hpp"

#include "shared/util/assert.hpp"

namespace fedcore::distributed {

GradientReducer::GradientReducer(collective::Communicator& comm, LayerStack& stack,
                                 ReducerOptions options)
    : comm_(comm), stack_(stack), options_(options) {
  const std::size_t layers = stack.layer_count();
  ready_after_layer_.assign(layers, -1);
  // Walk from the last layer down; a bucket closes once it is large enough, at its
  // lowest layer, which is the last of its layers whose gradients backward produces.
  std::size_t end = stack.params().size();
  std::size_t bytes = 0;
  for (std::size_t i = layers; i-- > 0;) {
    bytes += stack.layer_param_size(i) * sizeof(float);
    if (bytes >= options_.bucket_bytes || i == 0) {
      const std::size_t begin = stack.layer_param_begin(i);
      ready_after_layer_[i] = static_cast<int>(buckets_.size());
      buckets_.push_back({begin, end - begin});
      end = begin;
      bytes = 0;
    }
  }
  if (options_.overlap)
    thread_ = std::thread([this] { run(); });
}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

result<void> GradientReducer::reduce(std::size_t bucket) {
  const Bucket& b = buckets_[bucket];
  return collective::allreduce(comm_, {.data = stack_.grads().subspan(b.begin, b.size),
                                       .op = collective::ReduceOp::average,
                                       .timeout = options_.timeout});
}

void GradientReducer::layer_done(std::size_t layer) {
  if (!options_.overlap || ready_after_layer_[layer] < 0)
    return;
  {
    std::lock_guard lock(mutex_);
    ready_ = static_cast<std::size_t>(ready_after_layer_[layer]) + 1;
  }
  changed_.notify_all();
}

void GradientReducer::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || done_ < ready_; });
    if (stop_)
      return;
    const std::size_t bucket = done_;
    lock.unlock();
    auto reduced = reduce(bucket);
    lock.lock();
    if (!reduced && !error_)
      error_ = reduced.error();
    ++done_;
    changed_.notify_all();
  }
}

result<void> GradientReducer::finish() {
  if (!options_.overlap) {
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      if (auto ok = reduce(b); !ok)
        return ok.error();
    }
    return {};
  }
  std::unique_lock lock(mutex_);
  FEDCORE_ASSERT(ready_ == buckets_.size(), "finish before backward reached the first layer");
  changed_.wait(lock, [&] { return done_ == buckets_.size(); });
  ready_ = 0;
  done_ = 0;
  if (error_)
    return *error_;
  return {};
}

}  // namespace fedcore::distributed
