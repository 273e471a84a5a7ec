#include "distributed/pipeline.hpp"

#include <chrono>
#include <numeric>

#include "distributed/layer_stack.hpp"
#include "distributed/stage_balance.hpp"
#include "distributed/subgroup.hpp"
#include "distributed/train_support.hpp"
#include "shared/collective/collectives.hpp"
#include "shared/model/loss.hpp"
#include "shared/util/aligned_vector.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::distributed {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kActivationTag = 0;
constexpr std::uint32_t kGradientTag = 1u << 20;
constexpr std::uint32_t kGatherTag = 2u << 20;

std::span<std::byte> bytes(Matrix& m) {
  return std::as_writable_bytes(std::span<float>(m.data(), static_cast<std::size_t>(m.size())));
}
std::span<const std::byte> bytes(const Matrix& m) {
  return std::as_bytes(std::span<const float>(m.data(), static_cast<std::size_t>(m.size())));
}

// The stage boundaries, the same on every rank: parameter counts are, measured times are
// measured on rank 0 and broadcast.
result<std::vector<std::size_t>> stage_bounds(collective::Communicator& world,
                                              const model::Model& m, const PipelineOptions& o) {
  std::vector<double> costs = o.balance == Balance::params
                                  ? parameter_costs(m)
                                  : measured_costs(m, o.train.batch_size / o.micro_batches);
  if (o.balance == Balance::time) {
    auto ok = collective::broadcast(
        world, {.data = std::as_writable_bytes(std::span<double>(costs)), .root = 0});
    if (!ok)
      return ok.error();
  }
  return balance_stages(costs, static_cast<std::size_t>(o.stages));
}

// Replica 0's stages send their parameters and state to rank 0, which puts them into
// `whole`; then rank 0 tests `whole` and every rank gets the result. The replicas' running
// statistics are averaged first (their parameters are already identical).
result<model::EvalReport> evaluate_pipeline(collective::Communicator& world,
                                            collective::Communicator& pipe,
                                            collective::Communicator& dp, LayerStack& stack,
                                            model::Model& whole,
                                            std::span<const std::size_t> bounds, int s, int d,
                                            model::LossKind loss, const data::Dataset& test) {
  if (auto ok = average_state(dp, stack.state()); !ok)
    return ok.error();
  const int S = static_cast<int>(bounds.size()) - 1;
  if (d == 0 && s > 0) {
    auto ok = collective::send(
        pipe, {.peer = 0, .tag = kGatherTag, .data = std::as_bytes(stack.params())});
    if (ok && !stack.state().empty())
      ok = collective::send(
          pipe, {.peer = 0, .tag = kGatherTag + 1, .data = std::as_bytes(stack.state())});
    if (!ok)
      return ok.error();
  }
  if (d == 0 && s == 0) {
    std::copy(stack.params().begin(), stack.params().end(), whole.params().begin());
    std::copy(stack.state().begin(), stack.state().end(), whole.state().begin());
    for (int t = 1; t < S; ++t) {
      const auto slice = slice_of(whole, bounds[t], bounds[t + 1]);
      auto ok = collective::recv(pipe, {.peer = t,
                                        .tag = kGatherTag,
                                        .data = std::as_writable_bytes(whole.params().subspan(
                                            slice.param_offset, slice.param_size))});
      if (ok && slice.state_size > 0)
        ok = collective::recv(pipe, {.peer = t,
                                     .tag = kGatherTag + 1,
                                     .data = std::as_writable_bytes(whole.state().subspan(
                                         slice.state_offset, slice.state_size))});
      if (!ok)
        return ok.error();
    }
  }
  return evaluate_on_rank0(world, whole, loss, test);
}

}  // namespace

result<PipelineResult> train_pipeline(collective::Communicator& world, const data::TrainTest& data,
                                      const PipelineOptions& o) {
  const int S = o.stages;
  const int M = o.micro_batches;
  const int B = o.train.batch_size;
  if (S < 1 || world.size() % S != 0) {
    return fail(errc::invalid_argument, "world of " + std::to_string(world.size()) +
                                            " is not a multiple of " + std::to_string(S) +
                                            " stages");
  }
  if (M < 1 || B % M != 0) {
    return fail(
        errc::invalid_argument,
        std::to_string(M) + " micro-batches do not divide the batch of " + std::to_string(B));
  }
  if (o.train.spec.dropout > 0) {
    return fail(errc::invalid_argument,
                "pipeline stages recompute forwards: dropout is not supported");
  }
  const int D = world.size() / S;
  const int s = world.rank() % S;
  const int d = world.rank() / S;
  const std::size_t global_batch = static_cast<std::size_t>(B) * D;
  const std::size_t steps_per_epoch = data.train.size() / global_batch;
  if (steps_per_epoch == 0)
    return fail(errc::invalid_argument, "training set smaller than one global batch");
  std::size_t total_steps = steps_per_epoch * o.train.epochs;
  if (o.train.max_steps > 0)
    total_steps = std::min(total_steps, o.train.max_steps);

  auto built = model::build_model(o.train.spec);
  if (!built)
    return built.error();
  model::Model whole = std::move(*built);
  whole.initialize(o.train.seed);
  // Stage inputs are kept per micro-batch, so only its shape matters here.
  if (whole.layer_count() < static_cast<std::size_t>(S)) {
    return fail(errc::invalid_argument, "more stages than layers");
  }
  auto bounds = stage_bounds(world, whole, o);
  if (!bounds)
    return bounds.error();
  LayerStack stack(whole, (*bounds)[s], (*bounds)[s + 1]);

  // Replica d's pipeline is ranks d·S .. d·S+S-1; stage s's data-parallel group is
  // ranks s, S+s, 2S+s, ...: no two ranks share both, as make_subgroup requires.
  std::vector<int> pipe_members(S), dp_members(D);
  std::iota(pipe_members.begin(), pipe_members.end(), d * S);
  for (int r = 0; r < D; ++r)
    dp_members[r] = r * S + s;
  collective::Communicator pipe(make_subgroup(world.transport(), pipe_members),
                                world.job() + "/pipe" + std::to_string(d), world.default_timeout());
  collective::Communicator dp(make_subgroup(world.transport(), dp_members),
                              world.job() + "/stage" + std::to_string(s), world.default_timeout());

  const model::LossKind loss_kind = model::loss_for(o.train.spec);
  auto optimizer = model::make_optimizer(o.train.optimizer, stack.params().size());
  const int mb = B / M;
  const auto in_rows = static_cast<Eigen::Index>(stack.input_size());
  const auto out_rows = static_cast<Eigen::Index>(stack.output_size());
  std::vector<Matrix> inputs(M, Matrix(in_rows, mb));
  std::vector<Matrix> loss_grads(M);
  std::vector<std::int32_t> labels(B);
  AlignedVector<float> accumulated(stack.params().size());
  Matrix grad_out(out_rows, mb), grad_in;
  std::vector<std::size_t> order(data.train.size());
  std::size_t order_epoch = static_cast<std::size_t>(-1);
  int last_forward = -1;
  double step_loss = 0;
  double epoch_loss = 0;  // last stage only: the sum of its steps' losses this epoch
  std::size_t epoch_steps = 0;
  double compute_seconds = 0;
  auto timed = [&](auto&& work) {
    const auto t0 = Clock::now();
    work();
    compute_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  };

  auto forward = [&](int m) -> result<void> {
    if (s > 0) {
      auto ok = collective::recv(
          pipe, {.peer = s - 1, .tag = kActivationTag + m, .data = bytes(inputs[m])});
      if (!ok)
        return ok.error();
    }
    const Matrix* out_ptr = nullptr;
    timed([&] { out_ptr = &stack.forward(inputs[m], model::Phase::train); });
    const Matrix& out = *out_ptr;
    last_forward = m;
    if (s < S - 1)
      return collective::send(pipe, {.peer = s + 1, .tag = kActivationTag + m, .data = bytes(out)});
    const std::span<const std::int32_t> ys(labels.data() + m * mb, mb);
    step_loss += model::evaluate_loss(loss_kind, out, ys, &loss_grads[m]).loss / M;
    loss_grads[m] *= 1.0f / static_cast<float>(M);
    return {};
  };
  auto backward = [&](int m) -> result<void> {
    const Matrix* g = &loss_grads[m];
    if (s < S - 1) {
      auto ok =
          collective::recv(pipe, {.peer = s + 1, .tag = kGradientTag + m, .data = bytes(grad_out)});
      if (!ok)
        return ok.error();
      g = &grad_out;
    }
    timed([&] {
      if (last_forward != m)  // re-materialise; the statistics already counted this one
        stack.forward(inputs[m], model::Phase::train, /*track_state=*/false);
      stack.backward(*g, s > 0 ? &grad_in : nullptr);
    });
    last_forward = -1;
    const auto grads = stack.grads();
    for (std::size_t i = 0; i < grads.size(); ++i)
      accumulated[i] += grads[i];
    if (s > 0)
      return collective::send(pipe,
                              {.peer = s - 1, .tag = kGradientTag + m, .data = bytes(grad_in)});
    return {};
  };

  const auto start = Clock::now();
  const double comm_before = pipe.comm_seconds() + dp.comm_seconds();
  PipelineResult out;
  double eval_seconds = 0;  // evaluations, left out of the training time
  double eval_comm_seconds = 0;
  auto evaluate = [&]() -> result<model::EvalReport> {
    const auto t0 = Clock::now();
    const double c0 = pipe.comm_seconds() + dp.comm_seconds();
    auto eval =
        evaluate_pipeline(world, pipe, dp, stack, whole, *bounds, s, d, loss_kind, data.test);
    eval_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    eval_comm_seconds += pipe.comm_seconds() + dp.comm_seconds() - c0;
    return eval;
  };
  for (std::size_t step = 0; step < total_steps; ++step) {
    const std::size_t epoch = step / steps_per_epoch;
    if (epoch != order_epoch) {
      std::iota(order.begin(), order.end(), std::size_t{0});
      Rng rng(o.train.seed * 1'000'003 + epoch + 1);
      rng.shuffle(std::span<std::size_t>(order));
      order_epoch = epoch;
    }
    const std::size_t first =
        (step % steps_per_epoch) * global_batch + static_cast<std::size_t>(d) * B;
    for (int j = 0; j < B; ++j) {
      const std::size_t index = order[first + j];
      labels[j] = data.train.labels[index];
      if (s == 0)
        inputs[j / mb].col(j % mb) = data.train.features.col(static_cast<Eigen::Index>(index));
    }
    if (s == 0 && o.train.augmentation.enabled()) {
      Rng augment_rng(o.train.seed ^ (0x9e3779b97f4a7c15ULL * (step * 65537 + d + 1)));
      for (auto& input : inputs)
        data::augment_images(input, data.train.sample_shape, o.train.augmentation, augment_rng);
    }
    std::fill(accumulated.begin(), accumulated.end(), 0.0f);
    step_loss = 0;
    int f = 0, b = 0;
    const int warmup = o.schedule == Schedule::gpipe ? M : std::min(S - s - 1, M);
    result<void> ok;
    for (; ok && f < warmup; ++f)
      ok = forward(f);
    while (ok && f < M) {
      ok = forward(f++);
      if (ok)
        ok = backward(b++);
    }
    while (ok && b < M)
      ok = backward(b++);
    if (ok && D > 1) {
      ok = collective::allreduce(dp, {.data = accumulated, .op = collective::ReduceOp::average});
    }
    if (!ok) {
      world.fail_with(ok.error());
      return ok.error();
    }
    optimizer->step(stack.params(), accumulated);
    epoch_loss += step_loss;
    ++epoch_steps;
    if (o.train.evaluate_every_epoch && (step + 1) % steps_per_epoch == 0) {
      const double train_seconds =
          std::chrono::duration<double>(Clock::now() - start).count() - eval_seconds;
      auto eval = evaluate();
      if (!eval) {
        world.fail_with(eval.error());
        return eval.error();
      }
      // Only the last stage knows the loss; it is rank S - 1's to report.
      out.curve.push_back({static_cast<int>((step + 1) / steps_per_epoch), train_seconds,
                           s == S - 1 ? epoch_loss / double(epoch_steps) : -1.0, eval->accuracy,
                           eval->loss});
      epoch_loss = 0;
      epoch_steps = 0;
    }
  }
  out.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count() - eval_seconds;
  if (o.train.evaluate) {
    auto eval = evaluate();
    if (!eval) {
      world.fail_with(eval.error());
      return eval.error();
    }
    out.test_accuracy = eval->accuracy;
    out.test_loss = eval->loss;
  }
  out.compute_seconds = compute_seconds;
  out.output_values = stack.output_size();
  out.stages = S;
  out.replicas = D;
  out.stage = s;
  out.replica = d;
  out.first_layer = (*bounds)[s];
  out.last_layer = (*bounds)[s + 1];
  out.param_offset = stack.model_offset();
  out.params.assign(stack.params().begin(), stack.params().end());
  out.state_offset = stack.model_state_offset();
  out.state.assign(stack.state().begin(), stack.state().end());
  out.steps = total_steps;
  out.samples = static_cast<double>(total_steps * global_batch);
  out.samples_per_second = out.wall_seconds > 0 ? out.samples / out.wall_seconds : 0;
  out.comm_seconds = pipe.comm_seconds() + dp.comm_seconds() - comm_before - eval_comm_seconds;
  if (s == S - 1)
    out.final_loss = step_loss;
  return out;
}

}  // namespace fedcore::distributed
