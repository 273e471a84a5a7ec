#include "dist/data_parallel.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <optional>
#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "collective/collectives.hpp"
#include "dist/layer_stack.hpp"
#include "model/loss.hpp"
#include "model/param_io.hpp"
#include "model/trainer.hpp"
#include "util/checksum.hpp"
#include "util/rng.hpp"

namespace fedcore::dist {
namespace {

using Clock = std::chrono::steady_clock;

double cpu_seconds_now() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec * 1e-6;
}

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

std::string checkpoint_path(const std::string& dir) {
  return dir + "/dist-checkpoint.fcp";
}

// The global step a checkpoint was taken at, after loading its parameters into `stack`;
// 0 when there is none.
result<std::size_t> resume(const std::string& dir, const model::Model& reference,
                           LayerStack& stack) {
  if (dir.empty() || !std::filesystem::exists(checkpoint_path(dir)))
    return std::size_t{0};
  auto bundle = model::load_params(checkpoint_path(dir));
  if (!bundle)
    return bundle.error();
  if (bundle->layout.fingerprint() != reference.layout().fingerprint()) {
    return fail(errc::failed_precondition,
                "checkpoint " + checkpoint_path(dir) + " is for another model");
  }
  std::copy(bundle->params.begin(), bundle->params.end(), stack.params().begin());
  auto meta = nlohmann::json::parse(bundle->metadata_json, nullptr, false);
  if (!meta.is_object() || !meta.contains("step") || !meta["step"].is_number_unsigned()) {
    return fail(errc::data_loss, "checkpoint " + checkpoint_path(dir) + " has no step");
  }
  return meta["step"].get<std::size_t>();
}

// Synchronous elastic averaging (Zhang, Choromanska and LeCun 2015, eq. 3-4): with x_i
// the rank's parameters and c the center, x_i -= a (x_i - c) and c += a sum_i (x_i - c);
// sum_i (x_i - c) = p (mean - c) comes from one allreduce, so every rank updates its copy
// of c identically.
result<void> elastic_average(collective::Communicator& comm, std::span<float> params,
                             std::vector<float>& center, std::vector<float>& mean, float alpha) {
  std::copy(params.begin(), params.end(), mean.begin());
  auto ok = collective::allreduce(comm, {.data = mean, .op = collective::ReduceOp::average});
  if (!ok)
    return ok.error();
  const float p = static_cast<float>(comm.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    params[i] -= alpha * (params[i] - center[i]);
    center[i] += alpha * p * (mean[i] - center[i]);
  }
  return {};
}

}  // namespace

result<TrainResult> train_data_parallel(collective::Communicator& comm, const data::TrainTest& data,
                                        const TrainOptions& options) {
  const int world = comm.size();
  const int rank = comm.rank();
  if (options.batch_size <= 0 || options.epochs <= 0) {
    return fail(errc::invalid_argument, "batch size and epochs must be positive");
  }
  const std::size_t global_batch = static_cast<std::size_t>(options.batch_size) * world;
  const std::size_t steps_per_epoch = data.train.size() / global_batch;
  if (steps_per_epoch == 0) {
    return fail(errc::invalid_argument, "training set of " + std::to_string(data.train.size()) +
                                            " samples is smaller than one global batch of " +
                                            std::to_string(global_batch));
  }
  std::size_t total_steps = steps_per_epoch * options.epochs;
  if (options.max_steps > 0)
    total_steps = std::min(total_steps, options.max_steps);

  auto built = model::build_model(options.spec);
  if (!built)
    return built.error();
  model::Model reference = std::move(*built);
  reference.initialize(options.seed);
  LayerStack stack(reference, 0, reference.layer_count());
  auto start = resume(options.checkpoint_dir, reference, stack);
  if (!start)
    return start.error();
  // Rank 0's parameters are the truth, whether fresh or resumed.
  if (auto ok =
          collective::broadcast(comm, {.data = std::as_writable_bytes(stack.params()), .root = 0});
      !ok) {
    return ok.error();
  }

  const model::LossKind loss = model::loss_for(options.spec);
  auto optimizer = model::make_optimizer(options.optimizer, stack.params().size());
  // Synchronous SGD averages gradients every step; EASGD trains locally and pulls every
  // rank and the shared center variable together every `easgd_period` steps.
  const bool easgd = options.easgd_alpha > 0;
  std::optional<GradientReducer> reducer;
  if (!easgd)
    reducer.emplace(comm, stack, options.reducer);
  std::vector<float> center(stack.params().begin(), stack.params().end());
  std::vector<float> mean(easgd ? center.size() : 0);

  std::vector<std::size_t> order(data.train.size());
  std::size_t order_epoch = static_cast<std::size_t>(-1);
  Matrix batch(static_cast<Eigen::Index>(data.train.sample_size()), options.batch_size);
  std::vector<std::int32_t> labels(options.batch_size);
  Matrix grad_logits;
  double epoch_loss = 0;
  std::size_t epoch_steps = 0;

  const double comm_before = comm.comm_seconds();
  const double cpu_before = cpu_seconds_now();
  const auto wall_before = Clock::now();
  for (std::size_t step = *start; step < total_steps; ++step) {
    const std::size_t epoch = step / steps_per_epoch;
    if (epoch != order_epoch) {
      std::iota(order.begin(), order.end(), std::size_t{0});
      Rng rng(options.seed * 1'000'003 + epoch + 1);
      rng.shuffle(std::span<std::size_t>(order));
      order_epoch = epoch;
      epoch_loss = 0;
      epoch_steps = 0;
    }
    const std::size_t first = (step % steps_per_epoch) * global_batch + rank * options.batch_size;
    for (int j = 0; j < options.batch_size; ++j) {
      const std::size_t index = order[first + j];
      batch.col(j) = data.train.features.col(static_cast<Eigen::Index>(index));
      labels[j] = data.train.labels[index];
    }
    const Matrix& logits = stack.forward(batch, model::Phase::train);
    epoch_loss += model::evaluate_loss(loss, logits, labels, &grad_logits).loss;
    ++epoch_steps;
    const std::size_t done = step + 1;
    if (!easgd) {
      stack.backward(grad_logits, nullptr, [&](std::size_t layer) { reducer->layer_done(layer); });
      if (auto ok = reducer->finish(); !ok)
        return ok.error();
      optimizer->step(stack.params(), stack.grads());
    } else {
      stack.backward(grad_logits, nullptr);
      optimizer->step(stack.params(), stack.grads());
      if (done % std::max<std::size_t>(options.easgd_period, 1) == 0) {
        if (auto ok = elastic_average(comm, stack.params(), center, mean, options.easgd_alpha); !ok)
          return ok.error();
      }
    }

    if (!options.checkpoint_dir.empty() && options.checkpoint_every > 0 &&
        done % options.checkpoint_every == 0 && rank == 0) {
      const std::string meta = nlohmann::json{{"step", done}, {"world", world}}.dump();
      const std::span<const float> saved = easgd ? std::span<const float>(center) : stack.params();
      if (auto ok = model::save_params(checkpoint_path(options.checkpoint_dir), reference.layout(),
                                       saved, meta);
          !ok) {
        return ok.error();
      }
    }
    if (options.test_crash_after_step > 0 && done == options.test_crash_after_step && *start == 0) {
      std::fprintf(stderr, "rank %d: test hook: crashing after step %zu\n", rank, done);
      std::_Exit(17);
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - wall_before).count();
  // EASGD's model is the center variable, the same on every rank.
  if (easgd)
    std::copy(center.begin(), center.end(), stack.params().begin());

  TrainResult out;
  out.world = world;
  out.start_step = *start;
  out.steps = total_steps;
  out.final_train_loss = epoch_steps > 0 ? epoch_loss / epoch_steps : 0;
  RankStats mine;
  mine.rank = rank;
  mine.wall_seconds = wall;
  mine.cpu_seconds = cpu_seconds_now() - cpu_before;
  mine.comm_seconds = comm.comm_seconds() - comm_before;
  mine.peak_rss_mb = peak_rss_mb();
  mine.samples = static_cast<double>((total_steps - *start) * options.batch_size);
  mine.param_crc32 = crc32(std::as_bytes(stack.params()));

  // Everyone's statistics, as doubles (the CRC fits exactly).
  constexpr std::size_t kFields = 7;
  std::array<double, kFields> row{double(mine.rank),       mine.wall_seconds, mine.cpu_seconds,
                                  mine.comm_seconds,       mine.peak_rss_mb,  mine.samples,
                                  double(mine.param_crc32)};
  std::vector<double> table(kFields * world);
  if (auto ok =
          collective::allgather(comm, {.input = std::as_bytes(std::span<const double>(row)),
                                       .output = std::as_writable_bytes(std::span<double>(table))});
      !ok) {
    return ok.error();
  }
  for (int r = 0; r < world; ++r) {
    const double* t = table.data() + r * kFields;
    out.ranks.push_back(
        {static_cast<int>(t[0]), t[1], t[2], t[3], t[4], t[5], static_cast<std::uint32_t>(t[6])});
    out.samples += t[5];
    out.wall_seconds = std::max(out.wall_seconds, t[1]);
  }
  out.samples_per_second = out.wall_seconds > 0 ? out.samples / out.wall_seconds : 0;
  out.params.assign(stack.params().begin(), stack.params().end());
  if (options.evaluate && rank == 0 && data.test.size() > 0) {
    std::copy(stack.params().begin(), stack.params().end(), reference.params().begin());
    const auto eval = model::evaluate(reference, loss, data.test);
    out.test_accuracy = eval.accuracy;
    out.test_loss = eval.loss;
  }
  return out;
}

}  // namespace fedcore::dist
