#include "distributed/data_parallel.hpp"

#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "distributed/checkpoint.hpp"
#include "distributed/layer_stack.hpp"
#include "distributed/param_server.hpp"
#include "distributed/train_support.hpp"
#include "shared/collective/collectives.hpp"
#include "shared/model/loss.hpp"
#include "shared/model/trainer.hpp"
#include "shared/util/aligned_vector.hpp"
#include "shared/util/checksum.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// Synchronous elastic averaging (Zhang, Choromanska and LeCun 2015, eq. 3-4): with x_i
// the rank's parameters and c the center, x_i -= a (x_i - c) and c += a sum_i (x_i - c);
// sum_i (x_i - c) = p (mean - c) comes from one allreduce, so every rank updates its copy
// of c identically.
result<void> elastic_average(collective::Communicator& comm, std::span<float> params,
                             AlignedVector<float>& center, AlignedVector<float>& mean,
                             float alpha) {
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
  if (options.async == AsyncMode::parameter_server)
    return train_parameter_server(comm, data, options);
  const int world = comm.size();
  const int rank = comm.rank();
  if (options.batch_size <= 0 || options.epochs <= 0) {
    return fail(errc::invalid_argument, "batch size and epochs must be positive");
  }
  if (options.adaptive.enabled && options.easgd_alpha > 0) {
    return fail(errc::invalid_argument,
                "the adaptive batch split is for synchronous SGD; EASGD's ranks step on their own");
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
  const model::LossKind loss = model::loss_for(options.spec);
  auto optimizer = model::make_optimizer(options.optimizer, stack.params().size());
  auto start = restore_checkpoint(comm, options.checkpoint_dir, reference.layout(), stack.params(),
                                  *optimizer, reference.state_layout(), stack.state());
  if (!start)
    return start.error();
  // Rank 0's parameters (and state) are the truth, whether fresh or resumed.
  if (auto ok =
          collective::broadcast(comm, {.data = std::as_writable_bytes(stack.params()), .root = 0});
      !ok) {
    return ok.error();
  }
  if (!stack.state().empty()) {
    if (auto ok =
            collective::broadcast(comm, {.data = std::as_writable_bytes(stack.state()), .root = 0});
        !ok) {
      return ok.error();
    }
  }

  // Synchronous SGD averages gradients every step; EASGD trains locally and pulls every
  // rank and the shared center variable together every `easgd_period` steps.
  const bool easgd = options.easgd_alpha > 0;
  std::optional<GradientReducer> reducer;
  if (!easgd)
    reducer.emplace(comm, stack, options.reducer);
  AlignedVector<float> center(stack.params().begin(), stack.params().end());
  AlignedVector<float> mean(easgd ? center.size() : 0);

  ShardedBatches shards(data.train, options.batch_size, world, options.seed);
  AdaptiveSplit split(world, options.batch_size, options.adaptive);
  Matrix batch(static_cast<Eigen::Index>(data.train.sample_size()), options.batch_size);
  std::vector<std::int32_t> labels(options.batch_size);
  const bool slowed = options.test_slow_rank == rank && options.test_slowdown > 1.0;
  double last_compute = 0;
  double samples_trained = 0;
  Matrix grad_logits;
  double epoch_loss = 0;
  std::size_t epoch_steps = 0;

  std::vector<EpochPoint> curve;
  double eval_seconds = 0;  // evaluations, left out of the training time
  const auto meters = RunMeters::now(comm);
  const auto wall_before = Clock::now();
  for (std::size_t step = *start; step < total_steps; ++step) {
    if (step == *start || step % steps_per_epoch == 0) {
      epoch_loss = 0;
      epoch_steps = 0;
    }
    const int local = split.share(rank);
    if (batch.cols() != local) {
      batch.resize(batch.rows(), local);
      labels.resize(static_cast<std::size_t>(local));
    }
    shards.fill_range(step, static_cast<std::size_t>(split.offset(rank)), batch, labels);
    if (options.augmentation.enabled()) {
      Rng augment_rng(options.seed ^ (0x9e3779b97f4a7c15ULL * (step * 65537 + rank + 1)));
      data::augment_images(batch, data.train.sample_shape, options.augmentation, augment_rng);
    }
    const auto compute_start = Clock::now();
    const Matrix& logits = stack.forward(batch, model::Phase::train);
    epoch_loss += model::evaluate_loss(loss, logits, labels, &grad_logits).loss;
    ++epoch_steps;
    samples_trained += local;
    const std::size_t done = step + 1;
    if (options.adaptive.enabled)
      grad_logits *= split.gradient_scale(rank);
    double slept = 0;
    if (slowed && last_compute > 0) {
      const auto before = Clock::now();
      std::this_thread::sleep_for(
          std::chrono::duration<double>((options.test_slowdown - 1.0) * last_compute));
      slept = std::chrono::duration<double>(Clock::now() - before).count();
    }
    if (!easgd) {
      stack.backward(grad_logits, nullptr, [&](std::size_t layer) { reducer->layer_done(layer); });
      const double compute = std::chrono::duration<double>(Clock::now() - compute_start).count();
      last_compute = compute - slept;  // the machine's own speed, the basis of the slowdown
      split.record(compute, local);
      if (auto ok = reducer->finish(); !ok)
        return ok.error();
      optimizer->step(stack.params(), stack.grads());
      if (auto changed = split.after_step(comm, done); !changed)
        return changed.error();
    } else {
      stack.backward(grad_logits, nullptr);
      optimizer->step(stack.params(), stack.grads());
      if (done % std::max<std::size_t>(options.easgd_period, 1) == 0) {
        if (auto ok = elastic_average(comm, stack.params(), center, mean, options.easgd_alpha); !ok)
          return ok.error();
      }
    }

    const bool checkpoint = !options.checkpoint_dir.empty() && options.checkpoint_every > 0 &&
                            done % options.checkpoint_every == 0;
    // Every rank takes part in averaging the statistics a checkpoint holds, so that a
    // resumed job starts from what the uninterrupted one has at this step.
    if (checkpoint) {
      if (auto ok = average_state(comm, stack.state()); !ok)
        return ok.error();
    }
    if (checkpoint && rank == 0) {
      // EASGD's checkpoint holds the center and rank 0's optimizer state (the replicas'
      // own parameters and states are not saved: EASGD resumes from the center).
      const std::span<const float> saved = easgd ? std::span<const float>(center) : stack.params();
      if (auto ok = save_checkpoint(checkpoint_path(options.checkpoint_dir), reference.layout(),
                                    saved, optimizer->state(), done, world,
                                    reference.state_layout(), stack.state());
          !ok) {
        return ok.error();
      }
    }
    if (options.evaluate_every_epoch && done % steps_per_epoch == 0) {
      const auto paused = Clock::now();
      if (auto ok = average_state(comm, stack.state()); !ok)
        return ok.error();
      const std::span<const float> params = easgd ? std::span<const float>(center) : stack.params();
      auto eval = evaluate_everywhere(comm, params, stack.state(), reference, loss, data.test);
      if (!eval)
        return eval.error();
      const double train_seconds =
          std::chrono::duration<double>(paused - wall_before).count() - eval_seconds;
      curve.push_back({static_cast<int>(done / steps_per_epoch), train_seconds,
                       epoch_steps > 0 ? epoch_loss / epoch_steps : 0, eval->accuracy, eval->loss});
      eval_seconds += std::chrono::duration<double>(Clock::now() - paused).count();
      spdlog::info("rank {}: epoch {}: test accuracy {:.4f}, loss {:.4f} ({:.1f} s training)", rank,
                   curve.back().epoch, eval->accuracy, eval->loss, train_seconds);
    }
    if (options.test_crash_after_step > 0 && done == options.test_crash_after_step && *start == 0) {
      spdlog::warn("rank {}: test hook: crashing after step {}", rank, done);
      std::_Exit(17);
    }
  }
  const double wall =
      std::chrono::duration<double>(Clock::now() - wall_before).count() - eval_seconds;
  if (auto ok = average_state(comm, stack.state()); !ok)
    return ok.error();
  // EASGD's model is the center variable, the same on every rank.
  if (easgd)
    std::copy(center.begin(), center.end(), stack.params().begin());

  TrainResult out;
  out.world = world;
  out.start_step = *start;
  out.steps = total_steps;
  out.final_train_loss = epoch_steps > 0 ? epoch_loss / epoch_steps : 0;
  out.curve = std::move(curve);
  RankStats mine;
  mine.rank = rank;
  mine.wall_seconds = wall;
  mine.samples = samples_trained;
  out.splits = split.history();
  if (auto ok =
          finish_run(comm, meters, stack, reference, loss, data.test, options.evaluate, mine, out);
      !ok)
    return ok.error();
  return out;
}

}  // namespace fedcore::distributed
