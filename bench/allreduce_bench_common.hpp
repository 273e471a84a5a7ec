// Shared by the three allreduce benchmarks (fedcore, OpenMPI, gloo) so that all measure
// the same thing: the sizes, the iteration counts and the bus-bandwidth formula.
//
// For each size: kWarmups warm-up allreduces, then `iterations_for(bytes)` timed ones between
// barriers; time = mean per allreduce on rank 0. Bus bandwidth (nccl-tests convention):
// 2 (n-1)/n × bytes / time, what each link carries in a ring allreduce.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <vector>

namespace fedcore::bench {

inline std::vector<std::size_t> allreduce_sizes(std::size_t max_bytes) {
  std::vector<std::size_t> sizes;
  for (std::size_t b = 4096; b <= max_bytes; b *= 4)
    sizes.push_back(b);
  return sizes;
}

// Enough for every implementation's first operation of a size (buffer allocation, TCP
// windows, first touches of shared memory) to be out of the timed loop.
inline constexpr int kWarmups = 10;

// 512 MiB of payload per size, between 8 and 10,000 allreduces. A small allreduce takes a
// few microseconds, so the upper bound keeps its timed loop at tens of milliseconds rather
// than a fraction of one, where a single context switch would move the mean by percents.
inline int iterations_for(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>((std::size_t{512} << 20) / bytes, 8, 10'000));
}

inline double bus_bandwidth(int ranks, std::size_t bytes, double seconds) {
  return seconds > 0 ? 2.0 * (ranks - 1) / ranks * static_cast<double>(bytes) / seconds : 0;
}

// One result line, parsed by bench/allreduce_compare.sh:
//   allreduce <impl> ranks=<n> bytes=<b> seconds=<t> busbw_gbps=<GB/s>
inline void print_result(const char* impl, int ranks, std::size_t bytes, double seconds) {
  std::printf("allreduce %s ranks=%d bytes=%zu seconds=%.9f busbw_gbps=%.4f\n", impl, ranks, bytes,
              seconds, bus_bandwidth(ranks, bytes, seconds) / 1e9);
  std::fflush(stdout);
}

}  // namespace fedcore::bench
