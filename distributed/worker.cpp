#include "distributed/worker.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <optional>

#include <boost/asio/ssl/context.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "shared/collective/collectives.hpp"
#include "shared/collective/net_transport.hpp"
#ifdef FEDCORE_HAVE_MPI
#include "shared/collective/mpi_transport.hpp"
#endif
#include "distributed/rendezvous.hpp"
#include "distributed/report.hpp"
#include "distributed/train_support.hpp"
#include "shared/data/cifar10.hpp"
#include "shared/data/fashion_mnist.hpp"
#include "shared/data/image_transforms.hpp"
#include "shared/tls/context.hpp"
#include "shared/util/threads.hpp"

namespace fedcore::distributed {
namespace {

constexpr int kBadOptions = 2;
constexpr int kGroupFailed = 3;
constexpr int kLocalFailure = 4;

bool is_group_failure(errc code) {
  return code == errc::unavailable || code == errc::deadline_exceeded || code == errc::aborted ||
         code == errc::permission_denied || code == errc::unauthenticated;
}

data::Dataset first(const data::Dataset& d, std::size_t n) {
  if (n == 0 || n >= d.size())
    return d;
  std::vector<std::size_t> idx(n);
  for (std::size_t i = 0; i < n; ++i)
    idx[i] = i;
  return d.subset(idx);
}

result<data::TrainTest> load_data(const WorkerOptions& o) {
  using Data = WorkerOptions::Data;
  if (o.data == Data::cifar10) {
    if (o.data_dir.empty())
      return fail(errc::invalid_argument, "--data cifar10 needs --data-dir (the binary version)");
    auto cifar = data::load_cifar10(o.data_dir);
    if (cifar) {
      cifar->train = first(cifar->train, o.train_samples);
      cifar->test = first(cifar->test, o.test_samples);
    }
    return cifar;
  }
  auto loaded =
      o.data_dir.empty() ? data::load_fashion_mnist() : data::load_fashion_mnist(o.data_dir);
  if (!loaded)
    return loaded;
  // The subsets first: padding all 70,000 images to 32x32x3 would take 860 MB per rank.
  loaded->train = first(loaded->train, o.train_samples);
  loaded->test = first(loaded->test, o.test_samples);
  if (o.data == Data::fashion_mnist)
    return loaded;
  const std::int64_t channels = o.data == Data::fashion_mnist_32x3 ? 3 : 1;
  auto train = data::pad_images(loaded->train, 32, 32, channels);
  if (!train)
    return train.error();
  auto test = data::pad_images(loaded->test, 32, 32, channels);
  if (!test)
    return test.error();
  return data::TrainTest{std::move(*train), std::move(*test)};
}

int run_pipeline(collective::Communicator& comm, const data::TrainTest& data,
                 const TrainOptions& train, const WorkerOptions& o,
                 const std::string& transport_name) {
  PipelineOptions p;
  p.train = train;
  p.stages = o.stages;
  p.micro_batches = o.micro_batches;
  p.schedule = o.schedule;
  p.balance = o.balance;
  auto result = train_pipeline(comm, data, p);
  if (!result) {
    spdlog::error("rank {}: {}", comm.rank(), result.error().to_string());
    return is_group_failure(result.error().code) ? kGroupFailed : kLocalFailure;
  }
  // Every rank's wall, communication, compute and CPU time, peak RSS, loss and layer range,
  // for rank 0's report.
  std::array<double, 9> row{result->wall_seconds,
                            result->comm_seconds,
                            result->final_loss,
                            double(result->first_layer),
                            double(result->last_layer),
                            result->compute_seconds,
                            cpu_seconds_now(),
                            peak_rss_mb(),
                            double(result->output_values)};
  std::vector<double> table(row.size() * comm.size());
  if (auto ok =
          collective::allgather(comm, {.input = std::as_bytes(std::span<const double>(row)),
                                       .output = std::as_writable_bytes(std::span<double>(table))});
      !ok) {
    spdlog::error("rank {}: {}", comm.rank(), ok.error().to_string());
    return kGroupFailed;
  }
  if (comm.rank() != 0)
    return 0;
  double wall = 0;
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < comm.size(); ++r) {
    const double* t = table.data() + r * row.size();
    wall = std::max(wall, t[0]);
    ranks.push_back({{"rank", r},
                     {"stage", r % o.stages},
                     {"replica", r / o.stages},
                     {"wall_seconds", t[0]},
                     {"comm_seconds", t[1]},
                     {"comm_share", t[0] > 0 ? t[1] / t[0] : 0.0},
                     {"final_loss", t[2]},
                     {"layers", {t[3], t[4]}},
                     {"compute_seconds", t[5]},
                     {"cpu_seconds", t[6]},
                     {"peak_rss_mb", t[7]},
                     {"output_values", t[8]}});
  }
  const double rate = wall > 0 ? result->samples / wall : 0;
  const nlohmann::json report{{"mode", "pipeline"},
                              {"world", comm.size()},
                              {"transport", transport_name},
                              {"stages", result->stages},
                              {"replicas", result->replicas},
                              {"micro_batches", o.micro_batches},
                              {"schedule", o.schedule == Schedule::gpipe ? "gpipe" : "1f1b"},
                              {"local_batch", train.batch_size},
                              {"steps", result->steps},
                              {"samples", result->samples},
                              {"wall_seconds", wall},
                              {"samples_per_second", rate},
                              {"model", train.spec},
                              {"epochs", train.epochs},
                              {"balance", o.balance == Balance::time ? "time" : "params"},
                              {"test_accuracy", result->test_accuracy},
                              {"test_loss", result->test_loss},
                              {"curve", curve_json(result->curve)},
                              {"augmentation",
                               {{"crop_padding", train.augmentation.crop_padding},
                                {"horizontal_flip", train.augmentation.horizontal_flip}}},
                              {"ranks", ranks}};
  std::fprintf(stdout,
               "fedcore-dist pipeline: %d stages x %d replicas (%s), %d micro-batches, %zu steps, "
               "%.1f samples/s\n",
               result->stages, result->replicas, transport_name.c_str(), o.micro_batches,
               result->steps, rate);
  std::fflush(stdout);
  if (!o.report.empty()) {
    if (auto ok = write_text(o.report, report.dump(2) + "\n"); !ok)
      return kLocalFailure;
  }
  return 0;
}

}  // namespace

int run_worker(const WorkerOptions& o) {
  const int r = o.rank;
  if (o.world < 1 || r < 0 || r >= o.world) {
    spdlog::error("fedcore-dist worker: rank {} is not in a world of {}", r, o.world);
    return kBadOptions;
  }
  if (o.train.async == AsyncMode::parameter_server && o.world < 2) {
    spdlog::error(
        "fedcore-dist worker: --async ps needs at least 2 ranks (rank 0 serves, the others compute "
        "gradients); this job has {}",
        o.world);
    return kBadOptions;
  }
  set_compute_threads(o.compute_threads);

  auto loaded = load_data(o);
  if (!loaded) {
    spdlog::error("rank {}: {}", r, loaded.error().to_string());
    return kLocalFailure;
  }
  data::TrainTest data = std::move(*loaded);
  TrainOptions train = o.train;
  auto spec = model::complete_spec(train.spec, data.train.sample_shape, data.train.num_classes);
  if (!spec) {
    spdlog::error("rank {}: {}", r, spec.error().to_string());
    return kBadOptions;
  }
  train.spec = *spec;

  std::unique_ptr<RendezvousServer> server;
  if (r == 0 && o.transport != TransportKind::mpi) {
    auto hp = split_host_port(o.rendezvous);
    if (!hp) {
      spdlog::error("rank 0: {}", hp.error().to_string());
      return kBadOptions;
    }
    auto started = RendezvousServer::start(hp->first, hp->second, o.job, o.world, o.join_timeout);
    if (!started) {
      spdlog::error("rank 0: {}", started.error().to_string());
      return kGroupFailed;
    }
    server = std::move(*started);
  }

  TcpRendezvous rendezvous(o.rendezvous, o.job);
  collective::NetOptions net;
  net.rank = r;
  net.size = o.world;
  net.job = o.job;
  net.bind_host = o.bind_host;
  net.connect_timeout = o.join_timeout;
  net.transfer_timeout = o.op_timeout;
  net.spin = o.spin;
  // A ring per peer, all reserved up front: the budget is split, so a job's total in
  // /dev/shm is world x budget, not world^2 x ring.
  if (o.shared_memory_bytes > 0 && o.world > 1) {
    net.shared_memory_bytes =
        std::max<std::size_t>(o.shared_memory_bytes / (o.world - 1), std::size_t{1} << 20);
  }
  result<std::unique_ptr<collective::Transport>> transport = fail(errc::internal, "unset");
  std::optional<boost::asio::ssl::context> server_ctx, client_ctx;
  if (o.transport == TransportKind::tcp) {
    transport = collective::connect_tcp(net, rendezvous);
  } else if (o.transport == TransportKind::mpi) {
#ifdef FEDCORE_HAVE_MPI
    transport = collective::make_mpi_transport(MPI_COMM_WORLD);
#else
    spdlog::error("rank {}: this fedcore-dist was built without MPI (-DFEDCORE_MPI=ON)", r);
    return kBadOptions;
#endif
  } else {
    auto s = tls::make_server_context({o.tls.ca, o.tls.server_cert, o.tls.server_key, o.tls.crl});
    auto c = tls::make_client_context(
        {o.tls.ca, o.tls.client_cert, o.tls.client_key, o.tls.server_name});
    if (!s || !c) {
      spdlog::error("rank {}: TLS: {}", r, (!s ? s.error() : c.error()).to_string());
      return kBadOptions;
    }
    server_ctx.emplace(std::move(*s));
    client_ctx.emplace(std::move(*c));
    transport =
        collective::connect_tls(net, rendezvous, {&*server_ctx, &*client_ctx, o.tls.server_name});
  }
  if (!transport) {
    spdlog::error("rank {}: connecting the group: {}", r, transport.error().to_string());
    return kGroupFailed;
  }
  // "+shm": payloads between ranks on one host may go through shared-memory rings.
  const std::string transport_name =
      std::string((*transport)->name()) +
      (o.transport != TransportKind::mpi && o.shared_memory_bytes > 0 ? "+shm" : "");
  collective::Communicator comm(std::move(*transport), o.job, o.op_timeout);
  server.reset();  // the rendezvous is over once the mesh is up

  if (o.pipeline)
    return run_pipeline(comm, data, train, o, transport_name);
  auto result = train_data_parallel(comm, data, train);
  if (!result) {
    spdlog::error("rank {}: {}", r, result.error().to_string());
    return is_group_failure(result.error().code) ? kGroupFailed : kLocalFailure;
  }
  if (r == 0) {
    const auto report = run_report(*result, transport_name, train);
    if (result->async == AsyncMode::parameter_server) {
      const auto& ps = result->ps;
      std::fprintf(stdout,
                   "fedcore-dist ps-asgd: world %d (%s), 1 server + %d workers, %zu updates "
                   "applied, %zu discarded as stale, staleness mean %.2f max %zu, %.1f samples/s, "
                   "test accuracy %.4f\n",
                   result->world, transport_name.c_str(), ps.workers, ps.updates, ps.discarded,
                   ps.mean_staleness, ps.max_staleness, result->samples_per_second,
                   result->test_accuracy);
    }
    std::fprintf(stdout,
                 "fedcore-dist: world %d (%s), steps %zu..%zu, %.1f samples/s, test accuracy %.4f, "
                 "params identical on all ranks: %s\n",
                 result->world, transport_name.c_str(), result->start_step, result->steps,
                 result->samples_per_second, result->test_accuracy,
                 report["params_identical_on_all_ranks"].get<bool>() ? "yes" : "NO");
    std::fflush(stdout);
    if (!o.report.empty()) {
      if (auto ok = write_text(o.report, report.dump(2) + "\n"); !ok) {
        spdlog::error("rank 0: report: {}", ok.error().to_string());
        return kLocalFailure;
      }
    }
  }
  return 0;
}

}  // namespace fedcore::distributed
