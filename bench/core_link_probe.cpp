// How long a cache line takes to go from one CPU to another and back: two threads, one
// pinned to each CPU, hand a counter back and forth. Median of --trials runs of --trips
// round trips, in nanoseconds.
//
//   core_link_probe [--cpus 0,1] [--trips 100000] [--trials 5]
//
// Why it exists: on the 2-vCPU VMs these benchmarks run on, the host moves the two vCPUs
// between physical cores, and for minutes at a time they sit on cores that share no L3
// cache (a round trip of ~320 ns against ~55 ns when they share one). Every transfer
// between the two CPUs then slows down, fedcore's shared-memory rings and OpenMPI's
// alike (docs/results.md, "The 4-rank slow runs are the host's vCPU placement").
// bench/allreduce_compare.sh prints this line before each batch of runs so a table can be
// read against it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <sched.h>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int first_cpu = 0;
  int second_cpu = 1;
  long trips = 100000;
  int trials = 5;
};

// Whether this process may run on `cpu` (a CPU it cannot use would leave the two threads
// spinning in turn on one CPU, a time slice per hand-off).
bool may_run_on(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set);
}

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// One trial: nanoseconds per round trip, or < 0 when a thread could not be pinned.
double round_trip_ns(const Options& o) {
  alignas(64) std::atomic<long> turn{0};
  std::atomic<bool> pinned{true};
  std::thread echo([&] {
    if (!pin_to(o.second_cpu))
      pinned = false;
    for (long i = 1; i <= o.trips; ++i) {
      while (turn.load(std::memory_order_acquire) != 2 * i - 1) {
      }
      turn.store(2 * i, std::memory_order_release);
    }
  });
  if (!pin_to(o.first_cpu))
    pinned = false;
  const auto start = std::chrono::steady_clock::now();
  for (long i = 1; i <= o.trips; ++i) {
    turn.store(2 * i - 1, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != 2 * i) {
    }
  }
  const auto end = std::chrono::steady_clock::now();
  echo.join();
  if (!pinned)
    return -1;
  return std::chrono::duration<double, std::nano>(end - start).count() / double(o.trips);
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc)
      return false;
    const char* value = argv[++i];
    if (arg == "--cpus") {
      if (std::sscanf(value, "%d,%d", &o.first_cpu, &o.second_cpu) != 2)
        return false;
    } else if (arg == "--trips") {
      o.trips = std::atol(value);
    } else if (arg == "--trials") {
      o.trials = std::atoi(value);
    } else {
      return false;
    }
  }
  return o.trips > 0 && o.trials > 0 && o.first_cpu >= 0 && o.second_cpu >= 0 &&
         o.first_cpu != o.second_cpu;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, options)) {
    std::fprintf(stderr, "usage: core_link_probe [--cpus A,B] [--trips N] [--trials T] (A != B)\n");
    return 2;
  }
  if (!may_run_on(options.first_cpu) || !may_run_on(options.second_cpu)) {
    std::fprintf(stderr, "core_link_probe: this process may not run on CPUs %d and %d\n",
                 options.first_cpu, options.second_cpu);
    return 1;
  }
  std::vector<double> trials;
  for (int t = 0; t < options.trials; ++t) {
    const double ns = round_trip_ns(options);
    if (ns < 0) {
      std::fprintf(stderr, "core_link_probe: cannot pin threads to CPUs %d and %d\n",
                   options.first_cpu, options.second_cpu);
      return 1;
    }
    trials.push_back(ns);
  }
  std::sort(trials.begin(), trials.end());
  std::printf("core-link cpus=%d,%d roundtrip_ns=%.0f (trials %.0f..%.0f)\n", options.first_cpu,
              options.second_cpu, trials[trials.size() / 2], trials.front(), trials.back());
  return 0;
}
