// for_each_chunk: splits an element-wise loop over [0, n) into one contiguous chunk per
// compute thread (OpenMP). Element-wise work gives the same result however it is split;
// at or below `min_parallel` elements it runs on the calling thread, where a fork would
// cost more than it saves.
#pragma once

#include <algorithm>
#include <cstddef>
#include <omp.h>

namespace fedcore::model {

template <class Work>
void for_each_chunk(std::size_t n, std::size_t min_parallel, Work&& work) {
  if (n <= min_parallel) {
    work(std::size_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const auto threads = static_cast<std::size_t>(omp_get_num_threads());
    const auto thread = static_cast<std::size_t>(omp_get_thread_num());
    const std::size_t chunk = (n + threads - 1) / threads;
    const std::size_t begin = std::min(n, thread * chunk);
    work(begin, std::min(n, begin + chunk));
  }
}

}  // namespace fedcore::model
