// fedcore-dist: in-datacenter synchronous (and asynchronous) training (docs/dist.md).
//
//   fedcore-dist launch --nproc N [--max-restarts K] [--bind auto|none] -- <job options>
//   fedcore-dist worker --rank R --world N --rendezvous HOST:PORT <job options>
//   mpirun -n N fedcore-dist worker --backend mpi <job options>
//   fedcore-dist scale --nprocs 1,2 --out DIR [--bind auto|none] -- <job options>
//
// --log-format text|json, anywhere (shared/util/log_format.hpp, component "dist"): how the
// spdlog lines of this process look; given to launch or scale, it is forwarded to the
// workers with the job options.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "distributed/launcher.hpp"
#ifdef FEDCORE_HAVE_MPI
#include <mpi.h>
#endif
#include "distributed/report.hpp"
#include "distributed/worker.hpp"
#include "shared/model/optimizer.hpp"
#include "shared/model/spec.hpp"
#include "shared/util/log_format.hpp"

namespace {

using namespace fedcore;
using namespace fedcore::distributed;

struct JobFlags {
  WorkerOptions worker;
  std::string transport = "tcp";
  std::string model = R"({"type":"cnn"})";
  std::string data = "fashion-mnist";
  std::string optimizer = "sgd";
  float lr = 0.05f;
  float momentum = 0.0f;
  long join_timeout_ms = 60000;
  long op_timeout_ms = 60000;
  std::size_t bucket_kb = 4096;
  std::string shm = "auto";
  long shm_mb = 16;
  long spin_us = 0;
  bool no_overlap = false;
  std::string overlap = "auto";
  std::string mode = "ddp";
  std::string async = "none";
  long long max_staleness = -1;
  std::string staleness_lr = "constant";
  std::string schedule = "1f1b";
  std::string balance = "params";
  int crash_rank = -1;
  std::size_t crash_after = 0;
};

void add_job_options(CLI::App& app, JobFlags& f) {
  auto& w = f.worker;
  app.add_option("--job", w.job, "job id (every message carries it)");
  app.add_option("--transport", f.transport,
                 "tcp (trusted networks only), tls, or mpi (under mpirun)")
      ->check(CLI::IsMember({"tcp", "tls", "mpi"}));
  app.add_option("--tls-ca", w.tls.ca);
  app.add_option("--tls-crl", w.tls.crl);
  app.add_option("--tls-server-cert", w.tls.server_cert);
  app.add_option("--tls-server-key", w.tls.server_key);
  app.add_option("--tls-client-cert", w.tls.client_cert);
  app.add_option("--tls-client-key", w.tls.client_key);
  app.add_option("--tls-server-name", w.tls.server_name);
  app.add_option("--shm", f.shm,
                 "payloads between workers on one host through shared memory instead of their "
                 "sockets: on, off, or auto (on for tcp, off for tls)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--shm-mb", f.shm_mb,
                 "shared memory per worker for its payload rings, split among its peers "
                 "(at least 1 MiB per peer)")
      ->check(CLI::Range(1L, 1024L));
  app.add_option("--spin-us", f.spin_us,
                 "tcp/tls: microseconds a waiting collective polls before it sleeps")
      ->check(CLI::Range(0L, 1000000L));
  app.add_option("--bind-host", w.bind_host, "address this worker listens on for its peers");
  app.add_option("--join-timeout-ms", f.join_timeout_ms);
  app.add_option("--op-timeout-ms", f.op_timeout_ms, "deadline of every collective");
  app.add_option("--data", f.data,
                 "fashion-mnist (28x28x1), fashion-mnist-32 (padded to 32x32: the CIFAR-10 "
                 "stand-in), fashion-mnist-32x3 (the same in 3 channels), or cifar10 (binary "
                 "version from --data-dir)")
      ->check(
          CLI::IsMember({"fashion-mnist", "fashion-mnist-32", "fashion-mnist-32x3", "cifar10"}));
  app.add_option("--data-dir", w.data_dir, "Fashion-MNIST IDX or CIFAR-10 binary folder");
  app.add_option("--augment-crop", w.train.augmentation.crop_padding,
                 "random crop with this much zero padding on each side (0 = off; 4 is the CIFAR "
                 "recipe)")
      ->check(CLI::Range(0, 16));
  app.add_flag("--augment-flip", w.train.augmentation.horizontal_flip,
               "random horizontal flip of half the training images");
  app.add_flag("--adaptive-batch", w.train.adaptive.enabled,
               "heterogeneous workers: local batches in proportion to each rank's measured "
               "throughput, global batch fixed (synchronous ddp only)");
  app.add_option("--adaptive-period", w.train.adaptive.period,
                 "steps between throughput measurements of --adaptive-batch")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}));
  app.add_option("--adaptive-min-batch", w.train.adaptive.min_local_batch,
                 "no rank's local batch below this under --adaptive-batch")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--test-slow-rank", w.train.test_slow_rank,
                 "test/bench hook: this rank computes --test-slowdown times slower");
  app.add_option("--test-slowdown", w.train.test_slowdown)->check(CLI::Range(1.0, 100.0));
  app.add_flag("--eval-every-epoch", w.train.evaluate_every_epoch,
               "test after every epoch: the report's accuracy-per-epoch curve");
  app.add_option("--train-samples", w.train_samples, "use the first N training samples (0 = all)");
  app.add_option("--test-samples", w.test_samples);
  app.add_option("--threads", w.compute_threads, "compute threads per worker");
  app.add_option("--model", f.model, "model spec JSON");
  app.add_option("--optimizer", f.optimizer)->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--lr", f.lr);
  app.add_option("--momentum", f.momentum);
  app.add_option("--epochs", w.train.epochs);
  app.add_option("--batch", w.train.batch_size, "local batch per worker (global = batch x world)");
  app.add_option("--seed", w.train.seed);
  app.add_option("--max-steps", w.train.max_steps);
  app.add_option("--bucket-kb", f.bucket_kb, "gradient bucket size for the allreduce");
  app.add_option("--overlap", f.overlap,
                 "allreduce gradient buckets during backward on a communication thread: on, "
                 "off, or auto (on when this worker may use more CPUs than --threads)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_flag("--no-overlap", f.no_overlap, "the same as --overlap off");
  app.add_option(
      "--easgd-alpha", w.train.easgd_alpha,
      "elastic averaging SGD with this moving rate instead of synchronous SGD (0 = off)");
  app.add_option("--easgd-period", w.train.easgd_period, "local steps between elastic averagings");
  app.add_option("--mode", f.mode, "ddp (data parallel) or pipeline (hybrid when world > stages)")
      ->check(CLI::IsMember({"ddp", "pipeline"}));
  app.add_option("--async", f.async,
                 "ddp only: none (synchronous SGD) or ps (parameter-server asynchronous SGD: "
                 "rank 0 serves, ranks 1.. compute; needs >= 2 ranks)")
      ->check(CLI::IsMember({"none", "ps"}));
  app.add_option("--max-staleness", f.max_staleness,
                 "ps: discard gradients computed more than S updates ago (-1 = keep all)")
      ->check(CLI::Range(-1LL, 1000000000LL));
  app.add_option("--staleness-lr", f.staleness_lr,
                 "ps: constant, or inverse (lr / (staleness + 1) for each update)")
      ->check(CLI::IsMember({"constant", "inverse"}));
  app.add_option("--stages", w.stages, "pipeline stages (world must be a multiple)");
  app.add_option("--micro-batches", w.micro_batches,
                 "micro-batches per batch (must divide --batch)");
  app.add_option("--schedule", f.schedule)->check(CLI::IsMember({"gpipe", "1f1b"}));
  app.add_option("--balance", f.balance, "stage split by parameter count or measured time")
      ->check(CLI::IsMember({"params", "time"}));
  app.add_option("--checkpoint-dir", w.train.checkpoint_dir);
  app.add_option("--checkpoint-every", w.train.checkpoint_every, "steps between checkpoints");
  app.add_flag("--no-eval", [&w](std::int64_t) { w.train.evaluate = false; });
  app.add_option("--report", w.report, "rank 0 writes the run report (JSON) here");
  app.add_option("--test-crash-rank", f.crash_rank, "test hook");
  app.add_option("--test-crash-after-step", f.crash_after, "test hook");
}

int finish_job_flags(JobFlags& f) {
  auto& w = f.worker;
  w.data = f.data == "fashion-mnist-32"     ? WorkerOptions::Data::fashion_mnist_32
           : f.data == "fashion-mnist-32x3" ? WorkerOptions::Data::fashion_mnist_32x3
           : f.data == "cifar10"            ? WorkerOptions::Data::cifar10
                                            : WorkerOptions::Data::fashion_mnist;
  w.transport = f.transport == "tls"   ? TransportKind::tls
                : f.transport == "mpi" ? TransportKind::mpi
                                       : TransportKind::tcp;
  // TLS is chosen to have every byte between workers encrypted; shared memory between
  // processes of one user on one host is no wire, but that user must ask for it.
  const bool shm = f.shm == "on" || (f.shm == "auto" && w.transport == TransportKind::tcp);
  w.shared_memory_bytes = shm ? static_cast<std::size_t>(f.shm_mb) << 20 : 0;
  w.spin = std::chrono::microseconds(f.spin_us);
  w.join_timeout = std::chrono::milliseconds(f.join_timeout_ms);
  w.op_timeout = std::chrono::milliseconds(f.op_timeout_ms);
  w.train.reducer.bucket_bytes = f.bucket_kb * 1024;
  // Overlap hides the allreduce behind backward only if the communication thread has a
  // core of its own; on a worker bound to as many CPUs as it has compute threads (the
  // launcher's default on a small machine) the two threads would just take turns, and
  // measured 2-worker cnn throughput on 2 cores was about 5% lower with overlap than without.
  const bool spare_cpu = allowed_cpus().size() > static_cast<std::size_t>(w.compute_threads);
  w.train.reducer.overlap =
      !f.no_overlap && (f.overlap == "on" || (f.overlap == "auto" && spare_cpu));
  w.pipeline = f.mode == "pipeline";
  if (f.async == "ps" && w.pipeline) {
    std::cerr << "fedcore-dist: --async ps is a data-parallel mode; it needs --mode ddp\n";
    return 2;
  }
  w.train.async = f.async == "ps" ? AsyncMode::parameter_server : AsyncMode::none;
  w.train.max_staleness =
      f.max_staleness < 0 ? kUnboundedStaleness : static_cast<std::size_t>(f.max_staleness);
  w.train.staleness_lr = f.staleness_lr == "inverse" ? StalenessLr::inverse : StalenessLr::constant;
  w.schedule = f.schedule == "gpipe" ? Schedule::gpipe : Schedule::one_f_one_b;
  w.balance = f.balance == "time" ? Balance::time : Balance::params;
  auto spec = model::parse_model_spec(std::string_view(f.model));
  if (!spec) {
    std::cerr << "fedcore-dist: --model: " << spec.error().to_string() << "\n";
    return 2;
  }
  w.train.spec = *spec;
  w.train.optimizer.kind =
      f.optimizer == "adam" ? model::OptimizerKind::adam : model::OptimizerKind::sgd;
  w.train.optimizer.learning_rate = f.lr;
  w.train.optimizer.momentum = f.momentum;
  if (f.crash_rank == w.rank)
    w.train.test_crash_after_step = f.crash_after;
  return 0;
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  // Everything after "--" is the job's options, passed to the workers untouched.
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> job_args;
  const auto dash = std::find(args.begin(), args.end(), "--");
  const bool has_job_args = dash != args.end();
  if (has_job_args) {
    job_args.assign(dash + 1, args.end());
    args.erase(dash, args.end());
  }
  // The flag is taken out before CLI11 sees it, so every subcommand accepts it. In the job
  // options it stays: the launcher passes them on and each worker takes it there.
  auto own_format = take_log_format_flag(args);
  std::vector<std::string> job_copy = job_args;
  auto job_format = take_log_format_flag(job_copy);
  if (!own_format || !job_format) {
    std::cerr << "fedcore-dist: "
              << (own_format ? job_format.error().message : own_format.error().message) << "\n";
    return 2;
  }
  const LogFormat log_format =
      own_format->has_value() ? **own_format : job_format->value_or(LogFormat::text);
  install_log_format(log_format, {.component = "dist", .client = std::nullopt});
  if (has_job_args && own_format->has_value() && !job_format->has_value()) {
    job_args.push_back("--log-format");
    job_args.push_back(log_format == LogFormat::json ? "json" : "text");
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes a reversed vector

  CLI::App app{"fedcore-dist: synchronous data-parallel training on many workers"};
  app.require_subcommand(1);

  JobFlags flags;
  auto* worker = app.add_subcommand("worker", "run one worker (rank) of a job");
  worker->add_option("--rank", flags.worker.rank, "required unless --backend mpi");
  worker->add_option("--world", flags.worker.world, "required unless --backend mpi");
  worker->add_option("--rendezvous", flags.worker.rendezvous, "HOST:PORT; rank 0 hosts it");
  std::string backend = "net";
  worker
      ->add_option("--backend", backend,
                   "net (rendezvous + --transport tcp|tls) or mpi (under mpirun)")
      ->check(CLI::IsMember({"net", "mpi"}));
  add_job_options(*worker, flags);

  LaunchOptions launch_options;
  auto* launch = app.add_subcommand("launch", "start N local workers -- <job options>");
  launch->add_option("--nproc", launch_options.nproc)->required()->check(CLI::Range(1, 1024));
  launch->add_option("--max-restarts", launch_options.max_restarts);
  std::string binding = "auto";
  const auto add_binding = [&binding](CLI::App& command) {
    command
        .add_option("--bind", binding,
                    "auto: each worker on its own block of CPUs when there are enough; none")
        ->check(CLI::IsMember({"auto", "none"}));
  };
  add_binding(*launch);

  std::string nprocs = "1,2";
  std::string out_dir = ".";
  auto* scale = app.add_subcommand(
      "scale", "run the job on several world sizes and compare -- <job options>");
  scale->add_option("--nprocs", nprocs, "comma-separated world sizes");
  scale->add_option("--out", out_dir, "folder for run-N.json, scaling.json, scaling.svg");
  add_binding(*scale);

  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (worker->parsed()) {
    if (!job_args.empty()) {
      std::cerr << "fedcore-dist worker: job options go before '--' here\n";
      return 2;
    }
    if (backend == "mpi") {
      flags.transport = "mpi";
    }
    if (flags.transport == "mpi") {
#ifdef FEDCORE_HAVE_MPI
      int provided = 0;
      MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
      MPI_Comm_rank(MPI_COMM_WORLD, &flags.worker.rank);
      MPI_Comm_size(MPI_COMM_WORLD, &flags.worker.world);
      int code = finish_job_flags(flags);
      if (code == 0) {
        code = run_worker(flags.worker);
      }
      MPI_Finalize();
      return code;
#else
      std::cerr << "fedcore-dist: built without MPI (-DFEDCORE_MPI=ON)\n";
      return 2;
#endif
    }
    if (worker->count("--rank") == 0 || worker->count("--world") == 0) {
      std::cerr << "fedcore-dist worker: --rank and --world are required\n";
      return 2;
    }
    if (int code = finish_job_flags(flags); code != 0) {
      return code;
    }
    return run_worker(flags.worker);
  }
  launch_options.binding = binding == "none" ? CpuBinding::none : CpuBinding::automatic;
  launch_options.executable = "/proc/self/exe";
  launch_options.worker_args = job_args;
  if (launch->parsed())
    return distributed::launch(launch_options);

  std::vector<nlohmann::json> runs;
  for (int n : parse_list(nprocs)) {
    LaunchOptions one = launch_options;
    one.nproc = n;
    const std::string report = out_dir + "/run-" + std::to_string(n) + ".json";
    one.worker_args.push_back("--report");
    one.worker_args.push_back(report);
    if (int code = distributed::launch(one); code != 0)
      return code;
    std::ifstream in(report);
    runs.push_back(nlohmann::json::parse(in, nullptr, false));
    if (runs.back().is_discarded()) {
      std::cerr << "fedcore-dist scale: cannot read " << report << "\n";
      return 4;
    }
  }
  const auto scaling = scaling_report(runs);
  if (!write_text(out_dir + "/scaling.json", scaling.dump(2) + "\n") ||
      !write_text(out_dir + "/scaling.svg", scaling_svg(scaling))) {
    std::cerr << "fedcore-dist scale: cannot write the report in " << out_dir << "\n";
    return 4;
  }
  for (const auto& r : scaling["runs"]) {
    std::cout << "world " << r["world"] << ": " << r["samples_per_second"].get<double>()
              << " samples/s, speedup " << r["speedup"].get<double>() << ", efficiency "
              << r["efficiency"].get<double>() << ", test accuracy " << r["test_accuracy"]
              << " (delta " << r["accuracy_delta_vs_baseline"] << ")\n";
  }
  return 0;
}
