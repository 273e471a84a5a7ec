// Fedcore's ring allreduce between N local processes over TCP or TLS (127.0.0.1), sizes
// 4 KiB to --max-bytes; one result line per size (allreduce_bench_common.hpp).
//
//   allreduce_bench --ranks 4 --transport tcp
//   allreduce_bench --ranks 4 --transport tls --pki DIR   (DIR made by certs/fedcore-pki:
//                                                           init, server fedcore-server,
//                                                           client rank-peer)
//   allreduce_bench --ranks 4 --transport tcp --shm-mb 16  (messages through shared-memory
//                                                           rings; lines say fedcore-tcp+shm)
// Also: --spin-us US (poll before sleeping), --algorithm auto|ring|rd|hd, --max-bytes,
// --segment-bytes, --bind auto|none (auto, the default: each rank on its own block of
// CPUs when there are enough, as `fedcore-dist launch` and OpenMPI's mpirun bind; unbound,
// two lockstep ranks on this 2-CPU VM land on one CPU in some runs and then take 3x as
// long).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sched.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <boost/asio/ssl/context.hpp>

#include "bench/allreduce_bench_common.hpp"
#include "distributed/launcher.hpp"
#include "distributed/rendezvous.hpp"
#include "shared/collective/collectives.hpp"
#include "shared/collective/net_transport.hpp"
#include "shared/tls/context.hpp"

namespace {

using namespace fedcore;
using Clock = std::chrono::steady_clock;

struct Args {
  int ranks = 2;
  std::string transport = "tcp";
  std::string pki;
  std::size_t max_bytes = std::size_t{64} << 20;
  std::size_t segment_bytes = collective::kDefaultMaxSegmentBytes;
  std::size_t shm_mb = 0;
  long spin_us = 0;
  collective::AllreduceAlgorithm algorithm = collective::AllreduceAlgorithm::automatic;
  distributed::CpuBinding binding = distributed::CpuBinding::automatic;
};

int run_rank(const Args& a, int rank, const std::string& rendezvous_address) {
  std::unique_ptr<distributed::RendezvousServer> server;
  const int port = std::stoi(rendezvous_address.substr(rendezvous_address.rfind(':') + 1));
  if (rank == 0) {
    auto s = distributed::RendezvousServer::start("127.0.0.1", port, "bench", a.ranks,
                                                  std::chrono::seconds(30));
    if (!s) {
      std::fprintf(stderr, "rendezvous: %s\n", s.error().to_string().c_str());
      return 1;
    }
    server = std::move(*s);
  }
  distributed::TcpRendezvous rendezvous(rendezvous_address, "bench");
  collective::NetOptions net;
  net.rank = rank;
  net.size = a.ranks;
  net.job = "bench";
  net.shared_memory_bytes = a.shm_mb << 20;
  net.spin = std::chrono::microseconds(a.spin_us);
  result<std::unique_ptr<collective::Transport>> transport = fail(errc::internal, "unset");
  std::optional<boost::asio::ssl::context> sctx, cctx;
  if (a.transport == "tls") {
    auto s = tls::make_server_context({a.pki + "/ca.pem", a.pki + "/server/fedcore-server.pem",
                                       a.pki + "/server/fedcore-server.key", a.pki + "/crl.pem"});
    auto c = tls::make_client_context({a.pki + "/ca.pem", a.pki + "/clients/rank-peer.pem",
                                       a.pki + "/clients/rank-peer.key", "localhost"});
    if (!s || !c) {
      std::fprintf(stderr, "TLS: %s\n", (!s ? s.error() : c.error()).to_string().c_str());
      return 1;
    }
    sctx.emplace(std::move(*s));
    cctx.emplace(std::move(*c));
    transport = collective::connect_tls(net, rendezvous, {&*sctx, &*cctx, "localhost"});
  } else {
    transport = collective::connect_tcp(net, rendezvous);
  }
  if (!transport) {
    std::fprintf(stderr, "rank %d: %s\n", rank, transport.error().to_string().c_str());
    return 1;
  }
  server.reset();
  collective::Communicator comm(std::move(*transport), "bench", std::chrono::seconds(120));
  const std::string impl = "fedcore-" + a.transport + (a.shm_mb > 0 ? "+shm" : "");
  for (std::size_t bytes : bench::allreduce_sizes(a.max_bytes)) {
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    const collective::AllreduceOptions op{
        .data = data, .max_segment_bytes = a.segment_bytes, .algorithm = a.algorithm};
    for (int i = 0; i < bench::kWarmups; ++i) {
      if (auto ok = collective::allreduce(comm, op); !ok) {
        std::fprintf(stderr, "rank %d: %s\n", rank, ok.error().to_string().c_str());
        return 1;
      }
    }
    const int iterations = bench::iterations_for(bytes);
    if (!collective::barrier(comm))
      return 1;
    const auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      if (auto ok = collective::allreduce(comm, op); !ok) {
        std::fprintf(stderr, "rank %d: %s\n", rank, ok.error().to_string().c_str());
        return 1;
      }
    }
    if (!collective::barrier(comm))
      return 1;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / iterations;
    if (rank == 0)
      bench::print_result(impl.c_str(), a.ranks, bytes, seconds);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--ranks")
      a.ranks = std::stoi(v);
    else if (k == "--transport")
      a.transport = v;
    else if (k == "--pki")
      a.pki = v;
    else if (k == "--max-bytes")
      a.max_bytes = std::stoull(v);
    else if (k == "--segment-bytes")
      a.segment_bytes = std::stoull(v);
    else if (k == "--shm-mb")
      a.shm_mb = std::stoull(v);
    else if (k == "--spin-us")
      a.spin_us = std::stol(v);
    else if (k == "--bind" && (v == "auto" || v == "none"))
      a.binding = v == "auto" ? distributed::CpuBinding::automatic : distributed::CpuBinding::none;
    else if (k == "--algorithm" && (v == "ring" || v == "rd" || v == "hd" || v == "auto"))
      a.algorithm = v == "ring" ? collective::AllreduceAlgorithm::ring
                    : v == "rd" ? collective::AllreduceAlgorithm::recursive_doubling
                    : v == "hd" ? collective::AllreduceAlgorithm::halving_doubling
                                : collective::AllreduceAlgorithm::automatic;
    else {
      std::fprintf(stderr, "allreduce_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if ((a.transport != "tcp" && a.transport != "tls") || (a.transport == "tls" && a.pki.empty())) {
    std::fprintf(stderr, "allreduce_bench: --transport tcp, or tls with --pki DIR\n");
    return 2;
  }
  const std::string address =
      "127.0.0.1:" + std::to_string(distributed::pick_free_port("127.0.0.1"));
  const auto blocks = distributed::cpu_blocks(a.ranks, a.binding, distributed::allowed_cpus());
  std::vector<pid_t> children;
  for (int r = 0; r < a.ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      if (!distributed::bind_to_cpus(blocks[static_cast<std::size_t>(r)]))
        std::perror("allreduce_bench: sched_setaffinity (rank left unbound)");
      _exit(run_rank(a, r, address));
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      ++failed;
  }
  return failed == 0 ? 0 : 1;
}
