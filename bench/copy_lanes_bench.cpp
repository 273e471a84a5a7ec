// How fast one message moves between two processes on one host, by the two ways a
// shared-memory collective can move it:
//   copy-copy: the sender copies it into shared memory, the receiver copies it out (what
//              shm_ring.hpp does);
//   cma:       the receiver copies it once, straight out of the sender's memory, with
//              process_vm_readv (Linux "cross memory attach", OpenMPI vader's single copy).
// Each message is first written by the sender (as a reduction's output is), the two
// processes run on cores 0 and 1, and they take turns (the sender waits until the
// receiver has the message), so a line is the cost of producing and moving the bytes.
// Median of --repeats runs of --megabytes each per size and lane, GB/s of message bytes.
//
//   copy_lanes_bench [--repeats 5] [--megabytes 256]
//
// docs/results.md ("Single copy with CMA, measured") says what it decided.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sched.h>
#include <string>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

enum class Lane { copy_copy, cma };

// Shared between the two processes: turn counters, and where the sender's buffer lies.
struct Turns {
  std::atomic<long> produced{0};
  std::atomic<long> consumed{0};
  void* source = nullptr;
};

void pin_to(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  sched_setaffinity(0, sizeof(set), &set);  // best effort: one core machines still run
}

// One run: `messages` messages of `bytes` each. Returns seconds, or < 0 on failure.
double run(Lane lane, std::size_t bytes, long messages) {
  auto* turns = static_cast<Turns*>(
      mmap(nullptr, sizeof(Turns), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  auto* shared = static_cast<std::byte*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                              MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
  if (turns == MAP_FAILED || shared == MAP_FAILED)
    return -1;
  new (turns) Turns{};
  // Allocated before the fork: the child's copy of it is at the same address.
  std::vector<std::byte> source(bytes, std::byte{1});
  turns->source = source.data();
  const pid_t sender = fork();
  if (sender == 0) {
    pin_to(1);
    for (long i = 0; i < messages; ++i) {
      std::memset(source.data(), static_cast<int>(i & 0xff), bytes);
      if (lane == Lane::copy_copy)
        std::memcpy(shared, source.data(), bytes);
      turns->produced.store(i + 1, std::memory_order_release);
      while (turns->consumed.load(std::memory_order_acquire) != i + 1) {
      }
    }
    _exit(0);
  }
  pin_to(0);
  std::vector<std::byte> destination(bytes, std::byte{0});
  bool ok = true;
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < messages && ok; ++i) {
    while (turns->produced.load(std::memory_order_acquire) != i + 1) {
    }
    if (lane == Lane::copy_copy) {
      std::memcpy(destination.data(), shared, bytes);
    } else {
      iovec local{destination.data(), bytes};
      iovec remote{turns->source, bytes};
      ok = process_vm_readv(sender, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(bytes);
    }
    ok = ok && destination[bytes - 1] == static_cast<std::byte>(i & 0xff);
    turns->consumed.store(i + 1, std::memory_order_release);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!ok)
    kill(sender, SIGKILL);
  waitpid(sender, nullptr, 0);
  munmap(shared, bytes);
  munmap(turns, sizeof(Turns));
  return ok ? seconds : -1;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  long megabytes = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats")
      repeats = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--megabytes")
      megabytes = std::max(1L, std::atol(argv[i + 1]));
  }
  std::printf("%-10s %-10s %-10s %s\n", "size", "copy-copy", "cma", "cma / copy-copy");
  for (std::size_t bytes : {std::size_t{64} << 10, std::size_t{256} << 10, std::size_t{1} << 20,
                            std::size_t{4} << 20, std::size_t{16} << 20}) {
    const long messages = std::max(4L, static_cast<long>((megabytes << 20) / bytes));
    double gbps[2] = {0, 0};
    for (Lane lane : {Lane::copy_copy, Lane::cma}) {
      std::vector<double> rates;
      for (int r = 0; r < repeats; ++r) {
        const double seconds = run(lane, bytes, messages);
        if (seconds <= 0) {
          std::fprintf(stderr, "%s failed (process_vm_readv refused?)\n",
                       lane == Lane::cma ? "cma" : "copy-copy");
          return 1;
        }
        rates.push_back(double(bytes) * double(messages) / seconds / 1e9);
      }
      std::sort(rates.begin(), rates.end());
      gbps[lane == Lane::cma] = rates[rates.size() / 2];
    }
    std::printf("%-10s %-10.2f %-10.2f %.2f\n", (std::to_string(bytes >> 10) + " KiB").c_str(),
                gbps[0], gbps[1], gbps[1] / gbps[0]);
  }
  return 0;
}
