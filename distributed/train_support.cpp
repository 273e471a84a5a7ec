#include "distributed/train_support.hpp"

#include <algorithm>
#include <array>
#include <numeric>
#include <span>
#include <sys/resource.h>

#include "distributed/launcher.hpp"
#include "shared/collective/collectives.hpp"
#include "shared/model/trainer.hpp"
#include "shared/util/assert.hpp"
#include "shared/util/checksum.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::distributed {

double cpu_seconds_now() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec * 1e-6;
}

std::uint64_t cpu_mask() {
  std::uint64_t mask = 0;
  for (int cpu : allowed_cpus()) {
    if (cpu < kMaskedCpus)
      mask |= std::uint64_t{1} << cpu;
  }
  return mask;
}

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

ShardedBatches::ShardedBatches(const data::Dataset& train, int batch, int slots, std::uint64_t seed)
    : train_(train),
      batch_(batch),
      slots_(slots),
      seed_(seed),
      steps_per_epoch_(train.size() / (static_cast<std::size_t>(batch) * slots)),
      order_(train.size()) {
  FEDCORE_ASSERT(batch > 0 && slots > 0 && steps_per_epoch_ > 0,
                 "ShardedBatches: not one global batch of data");
}

void ShardedBatches::fill(std::size_t step, int slot, Matrix& batch,
                          std::vector<std::int32_t>& labels) {
  FEDCORE_ASSERT(slot >= 0 && slot < slots_, "ShardedBatches: slot out of range");
  FEDCORE_ASSERT(batch.cols() == batch_ && labels.size() == static_cast<std::size_t>(batch_),
                 "ShardedBatches: wrong batch size");
  fill_range(step, static_cast<std::size_t>(slot) * batch_, batch, labels);
}

void ShardedBatches::fill_range(std::size_t step, std::size_t first, Matrix& batch,
                                std::vector<std::int32_t>& labels) {
  const std::size_t global_batch = static_cast<std::size_t>(batch_) * slots_;
  const auto count = static_cast<std::size_t>(batch.cols());
  FEDCORE_ASSERT(first + count <= global_batch && labels.size() == count,
                 "ShardedBatches: range outside the global batch");
  const std::size_t epoch = epoch_of(step);
  if (epoch != order_epoch_) {
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    Rng rng(seed_ * 1'000'003 + epoch + 1);
    rng.shuffle(std::span<std::size_t>(order_));
    order_epoch_ = epoch;
  }
  const std::size_t start = (step % steps_per_epoch_) * global_batch + first;
  for (std::size_t j = 0; j < count; ++j) {
    const std::size_t index = order_[start + j];
    batch.col(static_cast<Eigen::Index>(j)) = train_.features.col(static_cast<Eigen::Index>(index));
    labels[j] = train_.labels[index];
  }
}

result<void> gather_rank_stats(collective::Communicator& comm, const RankStats& mine,
                               TrainResult& out) {
  // Everyone's statistics, as doubles (the CRC and a 52-bit CPU mask fit exactly).
  constexpr std::size_t kFields = 9;
  const int world = comm.size();
  std::array<double, kFields> row{
      double(mine.rank),        mine.wall_seconds,     mine.cpu_seconds,
      mine.comm_seconds,        mine.peak_rss_mb,      mine.samples,
      double(mine.param_crc32), double(mine.cpu_mask), mine.shared_memory_bytes};
  std::vector<double> table(kFields * world);
  if (auto ok =
          collective::allgather(comm, {.input = std::as_bytes(std::span<const double>(row)),
                                       .output = std::as_writable_bytes(std::span<double>(table))});
      !ok) {
    return ok.error();
  }
  out.ranks.clear();
  out.samples = 0;
  out.wall_seconds = 0;
  for (int r = 0; r < world; ++r) {
    const double* t = table.data() + r * kFields;
    out.ranks.push_back({static_cast<int>(t[0]), t[1], t[2], t[3], t[4], t[5],
                         static_cast<std::uint32_t>(t[6]), static_cast<std::uint64_t>(t[7]), t[8]});
    out.samples += t[5];
    out.wall_seconds = std::max(out.wall_seconds, t[1]);
  }
  out.samples_per_second = out.wall_seconds > 0 ? out.samples / out.wall_seconds : 0;
  return {};
}

result<void> average_state(collective::Communicator& comm, std::span<float> state) {
  if (state.empty() || comm.size() == 1)
    return {};
  return collective::allreduce(comm, {.data = state, .op = collective::ReduceOp::average});
}

result<model::EvalReport> evaluate_on_rank0(collective::Communicator& comm, model::Model& model,
                                            model::LossKind loss, const data::Dataset& test) {
  std::array<double, 2> result{0, 0};
  if (comm.rank() == 0 && test.size() > 0) {
    const auto eval = model::evaluate(model, loss, test);
    result = {eval.loss, eval.accuracy};
  }
  if (auto ok = collective::broadcast(
          comm, {.data = std::as_writable_bytes(std::span<double>(result)), .root = 0});
      !ok)
    return ok.error();
  model::EvalReport report;
  report.loss = result[0];
  report.accuracy = result[1];
  return report;
}

result<model::EvalReport> evaluate_everywhere(collective::Communicator& comm,
                                              std::span<const float> params,
                                              std::span<const float> state, model::Model& reference,
                                              model::LossKind loss, const data::Dataset& test) {
  if (comm.rank() == 0) {
    std::copy(params.begin(), params.end(), reference.params().begin());
    std::copy(state.begin(), state.end(), reference.state().begin());
  }
  return evaluate_on_rank0(comm, reference, loss, test);
}

RunMeters RunMeters::now(const collective::Communicator& comm) {
  return {cpu_seconds_now(), comm.comm_seconds()};
}

result<void> finish_run(collective::Communicator& comm, const RunMeters& started,
                        const LayerStack& stack, model::Model& reference, model::LossKind loss,
                        const data::Dataset& test, bool evaluate, RankStats& mine,
                        TrainResult& out) {
  mine.cpu_seconds = cpu_seconds_now() - started.cpu_seconds;
  mine.comm_seconds = comm.comm_seconds() - started.comm_seconds;
  mine.peak_rss_mb = peak_rss_mb();
  mine.cpu_mask = cpu_mask();
  mine.shared_memory_bytes = static_cast<double>(comm.transport().bytes_sent_shared_memory());
  mine.param_crc32 = crc32(std::as_bytes(stack.params()));
  if (auto ok = gather_rank_stats(comm, mine, out); !ok)
    return ok.error();
  out.params.assign(stack.params().begin(), stack.params().end());
  out.state.assign(stack.state().begin(), stack.state().end());
  if (evaluate && comm.rank() == 0 && test.size() > 0) {
    std::copy(stack.params().begin(), stack.params().end(), reference.params().begin());
    std::copy(stack.state().begin(), stack.state().end(), reference.state().begin());
    const auto eval = model::evaluate(reference, loss, test);
    out.test_accuracy = eval.accuracy;
    out.test_loss = eval.loss;
  }
  return {};
}

}  // namespace fedcore::distributed
