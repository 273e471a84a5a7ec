// gloo's ring allreduce (AllreduceRing<float>, TCP transport on 127.0.0.1) between N
// local processes, for the same sizes and iterations as allreduce_bench.
//   allreduce_gloo_bench --ranks 4
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <gloo/allreduce_ring.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <memory>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "bench/allreduce_bench_common.hpp"

namespace {

int run_rank(int rank, int ranks, const std::string& store_dir, std::size_t max_bytes) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(store_dir);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, ranks);
  context->connectFullMesh(store, device);
  for (std::size_t bytes : fedcore::bench::allreduce_sizes(max_bytes)) {
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    std::vector<float*> pointers{data.data()};
    gloo::AllreduceRing<float> allreduce(context, pointers, static_cast<int>(data.size()));
    gloo::BarrierAllToAll barrier(context);
    for (int i = 0; i < fedcore::bench::kWarmups; ++i)
      allreduce.run();
    const int iterations = fedcore::bench::iterations_for(bytes);
    barrier.run();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i)
      allreduce.run();
    barrier.run();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
        iterations;
    if (rank == 0)
      fedcore::bench::print_result("gloo-ring-tcp", ranks, bytes, seconds);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 2;
  std::size_t max_bytes = std::size_t{64} << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--ranks")
      ranks = std::stoi(argv[i + 1]);
    if (k == "--max-bytes")
      max_bytes = std::stoull(argv[i + 1]);
  }
  char pattern[] = "/tmp/gloo-store-XXXXXX";
  if (mkdtemp(pattern) == nullptr)
    return 1;
  const std::string dir = pattern;
  std::vector<pid_t> children;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 1;
      try {
        code = run_rank(r, ranks, dir, max_bytes);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gloo rank %d: %s\n", r, e.what());
      }
      _exit(code);
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
  std::filesystem::remove_all(dir);
  return failed == 0 ? 0 : 1;
}
