#include "distributed/param_server.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <numeric>
#include <span>

#include <spdlog/spdlog.h>

#include "distributed/checkpoint.hpp"
#include "distributed/layer_stack.hpp"
#include "distributed/train_support.hpp"
#include "shared/collective/collectives.hpp"
#include "shared/model/loss.hpp"
#include "shared/model/trainer.hpp"
#include "shared/util/aligned_vector.hpp"
#include "shared/util/assert.hpp"
#include "shared/util/checksum.hpp"

namespace fedcore::distributed {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::span<const std::byte> bytes_of(const PsHeader& header) {
  return std::as_bytes(std::span<const PsHeader>(&header, 1));
}

result<void> send_message(collective::Communicator& comm, int peer, const PsHeader& header,
                          std::span<const float> tensor) {
  if (auto ok =
          collective::send(comm, {.peer = peer, .tag = kPsHeaderTag, .data = bytes_of(header)});
      !ok) {
    return ok;
  }
  return collective::send(comm, {.peer = peer, .tag = kPsTensorTag, .data = std::as_bytes(tensor)});
}

// Receives a header and its tensor from `peer` (timeout 0: the communicator's default).
result<PsHeader> recv_message(collective::Communicator& comm, int peer, std::span<float> tensor,
                              milliseconds timeout) {
  PsHeader header;
  auto header_bytes = std::as_writable_bytes(std::span<PsHeader>(&header, 1));
  if (auto ok = collective::recv(
          comm, {.peer = peer, .tag = kPsHeaderTag, .data = header_bytes, .timeout = timeout});
      !ok) {
    return ok.error();
  }
  if (auto ok = collective::recv(comm, {.peer = peer,
                                        .tag = kPsTensorTag,
                                        .data = std::as_writable_bytes(tensor),
                                        .timeout = timeout});
      !ok) {
    return ok.error();
  }
  return header;
}

// The time left until `deadline`, at least 1 ms (0 would mean "the default timeout").
milliseconds time_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  return std::max(left, milliseconds(1));
}

error silent_worker(int rank, milliseconds timeout) {
  return fail(errc::deadline_exceeded, "parameter server: worker rank " + std::to_string(rank) +
                                           " sent no gradient within " +
                                           std::to_string(timeout.count()) +
                                           " ms of receiving parameters");
}

[[noreturn]] void test_crash(int rank, std::size_t step) {
  spdlog::warn("rank {}: test hook: crashing after step {}", rank, step);
  std::_Exit(17);
}

struct Job {
  const TrainOptions& options;
  int workers = 0;
  std::size_t start = 0;        // the version (server) the run resumed from
  std::size_t total_steps = 0;  // updates to apply in all
  std::size_t updates_per_epoch = 0;
};

struct ServerOutcome {
  PsStats stats;
  double final_train_loss = 0;  // mean over the updates of the last (partial) epoch
};

// The server's loop. Receiving "from any worker": probe_any waits until some worker's
// message is ready (the earliest arrival first), and only then is it received, with the
// ordinary per-peer recv. The alternative — one receiving thread per worker feeding a
// queue — would need a transport usable from several threads, which ours are not; and
// polling each worker with a short recv timeout would fail the communicator on the first
// timeout. The per-worker deadline is kept here instead: every worker owes one gradient
// from the moment it was sent parameters, so the probe waits until the oldest such
// request expires, and if nothing arrives by then that worker is the late one.
result<ServerOutcome> serve(collective::Communicator& comm, const Job& job,
                            const model::ParamLayout& layout, std::span<float> params,
                            model::Optimizer& optimizer) {
  const TrainOptions& o = job.options;
  const int world = comm.size();
  const milliseconds timeout = comm.default_timeout();
  const float base_lr = optimizer.learning_rate();
  std::vector<int> peers(job.workers);
  std::iota(peers.begin(), peers.end(), 1);
  std::vector<bool> owes(world, false);
  std::vector<Clock::time_point> asked(world);
  AlignedVector<float> gradient(params.size());
  std::size_t version = job.start;
  ServerOutcome out;
  PsStats& stats = out.stats;
  stats.workers = job.workers;
  double staleness_sum = 0;
  double epoch_loss = 0;
  std::size_t epoch_updates = 0;

  auto ask = [&](int peer, PsCommand command) -> result<void> {
    if (command == PsCommand::compute) {
      owes[peer] = true;
      asked[peer] = Clock::now();
    }
    return send_message(comm, peer, {.command = command, .version = version}, params);
  };
  for (int peer : peers) {
    if (version >= job.total_steps)
      break;
    if (auto ok = ask(peer, PsCommand::compute); !ok)
      return ok.error();
  }

  while (version < job.total_steps) {
    int oldest = peers.front();
    for (int peer : peers) {
      if (owes[peer] && (!owes[oldest] || asked[peer] < asked[oldest]))
        oldest = peer;
    }
    FEDCORE_ASSERT(owes[oldest], "parameter server: every worker owes a gradient in the loop");
    const auto deadline = asked[oldest] + timeout;
    // Checked before probing too: a stream of other workers' gradients must not hide it.
    auto late = [&] { return comm.fail_with(silent_worker(oldest, timeout)); };
    if (Clock::now() >= deadline)
      return late();
    auto ready = collective::probe_any(comm, {.peers = peers, .timeout = time_left(deadline)});
    if (!ready)
      return ready.error();
    if (!*ready)
      return late();
    const int peer = **ready;
    auto header = recv_message(comm, peer, gradient, time_left(asked[peer] + timeout));
    if (!header)
      return header.error();
    if (header->command != PsCommand::gradient || header->version > version || !owes[peer]) {
      return comm.fail_with(
          fail(errc::data_loss, "parameter server: rank " + std::to_string(peer) +
                                    " sent an unexpected message (command " +
                                    std::to_string(static_cast<std::uint64_t>(header->command)) +
                                    ", version " + std::to_string(header->version) +
                                    ", current version " + std::to_string(version) + ")"));
    }
    owes[peer] = false;
    ++stats.received;
    const std::size_t staleness = version - header->version;
    if (staleness > o.max_staleness) {
      ++stats.discarded;
    } else {
      optimizer.set_learning_rate(o.staleness_lr == StalenessLr::inverse
                                      ? base_lr / static_cast<float>(staleness + 1)
                                      : base_lr);
      optimizer.step(params, gradient);
      ++version;
      ++stats.updates;
      staleness_sum += static_cast<double>(staleness);
      stats.max_staleness = std::max(stats.max_staleness, staleness);
      if (stats.staleness_histogram.size() <= staleness)
        stats.staleness_histogram.resize(staleness + 1, 0);
      ++stats.staleness_histogram[staleness];
      if ((version - 1) % job.updates_per_epoch == 0 || epoch_updates == 0) {
        epoch_loss = 0;
        epoch_updates = 0;
      }
      epoch_loss += header->loss;
      ++epoch_updates;
      if (!o.checkpoint_dir.empty() && o.checkpoint_every > 0 &&
          version % o.checkpoint_every == 0) {
        if (auto ok = save_checkpoint(checkpoint_path(o.checkpoint_dir), layout, params,
                                      optimizer.state(), version, world);
            !ok) {
          return ok.error();
        }
      }
      if (o.test_crash_after_step > 0 && version == o.test_crash_after_step && job.start == 0)
        test_crash(comm.rank(), version);
    }
    if (version < job.total_steps) {
      if (auto ok = ask(peer, PsCommand::compute); !ok)
        return ok.error();
    }
  }
  optimizer.set_learning_rate(base_lr);

  // The budget is spent: take the gradients still owed (their workers are computing or
  // sending them), then stop everybody with the final parameters, so that no message is
  // left in flight when the group moves on.
  for (int peer : peers) {
    if (owes[peer]) {
      const std::array<int, 1> one{peer};
      auto ready =
          collective::probe_any(comm, {.peers = one, .timeout = time_left(asked[peer] + timeout)});
      if (!ready)
        return ready.error();
      if (!*ready)
        return comm.fail_with(silent_worker(peer, timeout));
      auto header = recv_message(comm, peer, gradient, time_left(asked[peer] + timeout));
      if (!header)
        return header.error();
      owes[peer] = false;
      ++stats.received;
      ++stats.unused_at_stop;
    }
    if (auto ok = ask(peer, PsCommand::stop); !ok)
      return ok.error();
  }
  stats.mean_staleness = stats.updates > 0 ? staleness_sum / static_cast<double>(stats.updates) : 0;
  out.final_train_loss = epoch_updates > 0 ? epoch_loss / static_cast<double>(epoch_updates) : 0;
  return out;
}

struct WorkerOutcome {
  std::size_t gradients = 0;
  double final_train_loss = 0;  // mean over this worker's current epoch
};

// A worker's loop: parameters in, one gradient out, until the server says stop.
result<WorkerOutcome> work(collective::Communicator& comm, const Job& job,
                           const data::Dataset& train, model::LossKind loss, LayerStack& stack) {
  const TrainOptions& o = job.options;
  const int slot = comm.rank() - 1;
  ShardedBatches shards(train, o.batch_size, job.workers, o.seed);
  Matrix batch(static_cast<Eigen::Index>(train.sample_size()), o.batch_size);
  std::vector<std::int32_t> labels(o.batch_size);
  Matrix grad_logits;
  WorkerOutcome out;
  std::size_t step = 0;  // this worker's position in its shard walk
  double epoch_loss = 0;
  std::size_t epoch_steps = 0;
  for (bool first = true;; first = false) {
    auto header = recv_message(comm, 0, stack.params(), milliseconds(0));
    if (!header)
      return header.error();
    if (header->command == PsCommand::stop)
      break;
    if (header->command != PsCommand::compute) {
      return comm.fail_with(
          fail(errc::data_loss, "parameter-server worker: unexpected command " +
                                    std::to_string(static_cast<std::uint64_t>(header->command))));
    }
    if (first)
      step = header->version / static_cast<std::size_t>(job.workers);
    if (first || step % shards.steps_per_epoch() == 0) {
      epoch_loss = 0;
      epoch_steps = 0;
    }
    shards.fill(step, slot, batch, labels);
    ++step;
    const Matrix& logits = stack.forward(batch, model::Phase::train);
    const double batch_loss = model::evaluate_loss(loss, logits, labels, &grad_logits).loss;
    stack.backward(grad_logits, nullptr);
    epoch_loss += batch_loss;
    ++epoch_steps;
    const PsHeader reply{.command = PsCommand::gradient,
                         .version = header->version,
                         .loss = batch_loss,
                         .samples = static_cast<std::uint64_t>(o.batch_size)};
    if (auto ok = send_message(comm, 0, reply, stack.grads()); !ok)
      return ok.error();
    ++out.gradients;
    if (o.test_crash_after_step > 0 && out.gradients == o.test_crash_after_step && job.start == 0)
      test_crash(comm.rank(), out.gradients);
  }
  out.final_train_loss = epoch_steps > 0 ? epoch_loss / static_cast<double>(epoch_steps) : 0;
  return out;
}

}  // namespace

result<TrainResult> train_parameter_server(collective::Communicator& comm,
                                           const data::TrainTest& data,
                                           const TrainOptions& options) {
  const int world = comm.size();
  const int rank = comm.rank();
  if (world < 2) {
    return fail(errc::invalid_argument,
                "the parameter-server mode needs at least 2 ranks (rank 0 serves, the others "
                "compute gradients); this group has 1");
  }
  if (options.easgd_alpha > 0) {
    return fail(errc::invalid_argument,
                "EASGD and the parameter server are two different asynchronous modes; choose one");
  }
  if (options.batch_size <= 0 || options.epochs <= 0) {
    return fail(errc::invalid_argument, "batch size and epochs must be positive");
  }
  Job job{.options = options, .workers = world - 1};
  const std::size_t global_batch = static_cast<std::size_t>(options.batch_size) * job.workers;
  const std::size_t steps_per_epoch = data.train.size() / global_batch;
  if (steps_per_epoch == 0) {
    return fail(errc::invalid_argument, "training set of " + std::to_string(data.train.size()) +
                                            " samples is smaller than one batch for each of the " +
                                            std::to_string(job.workers) + " workers (" +
                                            std::to_string(global_batch) + ")");
  }
  job.updates_per_epoch = steps_per_epoch * job.workers;
  job.total_steps = job.updates_per_epoch * options.epochs;
  if (options.max_steps > 0)
    job.total_steps = std::min(job.total_steps, options.max_steps);

  auto built = model::build_model(options.spec);
  if (!built)
    return built.error();
  model::Model reference = std::move(*built);
  if (!reference.state().empty()) {
    // The server steps the parameters but never runs the model, so BatchNorm's running
    // statistics (which the workers' forwards update) would never reach it.
    return fail(errc::invalid_argument,
                "parameter-server ASGD does not carry BatchNorm running statistics; train this "
                "model with synchronous data parallelism (--async none) or a pipeline");
  }
  reference.initialize(options.seed);
  LayerStack stack(reference, 0, reference.layer_count());
  const model::LossKind loss = model::loss_for(options.spec);
  // Only the server steps the optimizer; every rank restores into one so that the
  // checkpoint's broadcast has the same shape everywhere.
  auto optimizer = model::make_optimizer(options.optimizer, stack.params().size());
  auto start = restore_checkpoint(comm, options.checkpoint_dir, reference.layout(), stack.params(),
                                  *optimizer);
  if (!start)
    return start.error();
  job.start = *start;

  TrainResult out;
  out.world = world;
  out.async = AsyncMode::parameter_server;
  out.start_step = job.start;
  out.steps = std::max(job.total_steps, job.start);
  out.ps.workers = job.workers;
  RankStats mine;
  mine.rank = rank;
  const auto meters = RunMeters::now(comm);
  const auto wall_before = Clock::now();
  if (rank == 0) {
    auto served = serve(comm, job, reference.layout(), stack.params(), *optimizer);
    if (!served)
      return served.error();
    out.ps = served->stats;
    out.final_train_loss = served->final_train_loss;
  } else {
    auto worked = work(comm, job, data.train, loss, stack);
    if (!worked)
      return worked.error();
    mine.samples = static_cast<double>(worked->gradients * options.batch_size);
    out.final_train_loss = worked->final_train_loss;
  }
  mine.wall_seconds = std::chrono::duration<double>(Clock::now() - wall_before).count();
  if (auto ok =
          finish_run(comm, meters, stack, reference, loss, data.test, options.evaluate, mine, out);
      !ok)
    return ok.error();
  return out;
}

}  // namespace fedcore::distributed
