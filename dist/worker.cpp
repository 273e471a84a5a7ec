#include "dist/worker.hpp"

#include <cstdio>
#include <optional>

#include <boost/asio/ssl/context.hpp>
#include <nlohmann/json.hpp>

#include "collective/net_transport.hpp"
#include "data/fashion_mnist.hpp"
#include "dist/rendezvous.hpp"
#include "dist/report.hpp"
#include "tls/context.hpp"
#include "util/threads.hpp"

namespace fedcore::dist {
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

}  // namespace

int run_worker(const WorkerOptions& o) {
  const int r = o.rank;
  if (o.world < 1 || r < 0 || r >= o.world) {
    std::fprintf(stderr, "fedcore-dist worker: rank %d is not in a world of %d\n", r, o.world);
    return kBadOptions;
  }
  set_compute_threads(o.compute_threads);

  auto loaded =
      o.data_dir.empty() ? data::load_fashion_mnist() : data::load_fashion_mnist(o.data_dir);
  if (!loaded) {
    std::fprintf(stderr, "rank %d: %s\n", r, loaded.error().to_string().c_str());
    return kLocalFailure;
  }
  data::TrainTest data{first(loaded->train, o.train_samples), first(loaded->test, o.test_samples)};
  TrainOptions train = o.train;
  auto spec = model::complete_spec(train.spec, data.train.sample_shape, data.train.num_classes);
  if (!spec) {
    std::fprintf(stderr, "rank %d: %s\n", r, spec.error().to_string().c_str());
    return kBadOptions;
  }
  train.spec = *spec;

  std::unique_ptr<RendezvousServer> server;
  if (r == 0) {
    auto hp = split_host_port(o.rendezvous);
    if (!hp) {
      std::fprintf(stderr, "rank 0: %s\n", hp.error().to_string().c_str());
      return kBadOptions;
    }
    auto started = RendezvousServer::start(hp->first, hp->second, o.job, o.world, o.join_timeout);
    if (!started) {
      std::fprintf(stderr, "rank 0: %s\n", started.error().to_string().c_str());
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
  result<std::unique_ptr<collective::Transport>> transport = fail(errc::internal, "unset");
  std::optional<boost::asio::ssl::context> server_ctx, client_ctx;
  if (o.transport == TransportKind::tcp) {
    transport = collective::connect_tcp(net, rendezvous);
  } else {
    auto s = tls::make_server_context({o.tls.ca, o.tls.server_cert, o.tls.server_key, o.tls.crl});
    auto c = tls::make_client_context(
        {o.tls.ca, o.tls.client_cert, o.tls.client_key, o.tls.server_name});
    if (!s || !c) {
      std::fprintf(stderr, "rank %d: TLS: %s\n", r,
                   (!s ? s.error() : c.error()).to_string().c_str());
      return kBadOptions;
    }
    server_ctx.emplace(std::move(*s));
    client_ctx.emplace(std::move(*c));
    transport =
        collective::connect_tls(net, rendezvous, {&*server_ctx, &*client_ctx, o.tls.server_name});
  }
  if (!transport) {
    std::fprintf(stderr, "rank %d: connecting the group: %s\n", r,
                 transport.error().to_string().c_str());
    return kGroupFailed;
  }
  const std::string transport_name = (*transport)->name();
  collective::Communicator comm(std::move(*transport), o.job, o.op_timeout);
  server.reset();  // the rendezvous is over once the mesh is up

  auto result = train_data_parallel(comm, data, train);
  if (!result) {
    std::fprintf(stderr, "rank %d: %s\n", r, result.error().to_string().c_str());
    return is_group_failure(result.error().code) ? kGroupFailed : kLocalFailure;
  }
  if (r == 0) {
    const auto report = run_report(*result, transport_name, train);
    std::fprintf(stdout,
                 "fedcore-dist: world %d (%s), steps %zu..%zu, %.1f samples/s, test accuracy %.4f, "
                 "params identical on all ranks: %s\n",
                 result->world, transport_name.c_str(), result->start_step, result->steps,
                 result->samples_per_second, result->test_accuracy,
                 report["params_identical_on_all_ranks"].get<bool>() ? "yes" : "NO");
    std::fflush(stdout);
    if (!o.report.empty()) {
      if (auto ok = write_text(o.report, report.dump(2) + "\n"); !ok) {
        std::fprintf(stderr, "rank 0: report: %s\n", ok.error().to_string().c_str());
        return kLocalFailure;
      }
    }
  }
  return 0;
}

}  // namespace fedcore::dist
