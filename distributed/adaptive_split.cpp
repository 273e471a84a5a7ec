#include "distributed/adaptive_split.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "shared/collective/collectives.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::distributed {

std::vector<int> proportional_split(int global, std::span<const double> throughputs,
                                    int min_share) {
  const int ranks = static_cast<int>(throughputs.size());
  FEDCORE_ASSERT(ranks > 0 && min_share >= 1 && global >= min_share * ranks,
                 "proportional_split: not enough samples for every rank's minimum");
  const double total = std::accumulate(throughputs.begin(), throughputs.end(), 0.0);
  const int spare = global - min_share * ranks;
  std::vector<int> split(static_cast<std::size_t>(ranks), min_share);
  std::vector<std::pair<double, int>> remainders;
  int given = 0;
  for (int r = 0; r < ranks; ++r) {
    // A rank that measured nothing (or a total of zero) gets an equal part.
    const double part =
        total > 0 ? throughputs[static_cast<std::size_t>(r)] / total : 1.0 / double(ranks);
    const double exact = part * spare;
    const int whole = static_cast<int>(std::floor(exact));
    split[static_cast<std::size_t>(r)] += whole;
    given += whole;
    remainders.push_back({exact - whole, r});
  }
  // Largest remainders first; equal remainders to the lower rank, so every rank agrees.
  std::sort(remainders.begin(), remainders.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (int k = 0; given < spare; ++k, ++given) {
    ++split[static_cast<std::size_t>(remainders[static_cast<std::size_t>(k)].second)];
  }
  return split;
}

AdaptiveSplit::AdaptiveSplit(int world, int local_batch, const AdaptiveSplitOptions& options)
    : world_(world),
      global_(world * local_batch),
      options_(options),
      split_(static_cast<std::size_t>(world), local_batch) {
  FEDCORE_ASSERT(world >= 1 && local_batch >= 1, "AdaptiveSplit: bad world or batch");
  options_.min_local_batch = std::clamp(options_.min_local_batch, 1, local_batch);
  options_.period = std::max<std::size_t>(options_.period, 1);
}

int AdaptiveSplit::offset(int rank) const {
  return std::accumulate(split_.begin(), split_.begin() + rank, 0);
}

float AdaptiveSplit::gradient_scale(int rank) const {
  return static_cast<float>(double(share(rank)) * world_ / double(global_));
}

void AdaptiveSplit::record(double seconds, int samples) {
  seconds_ += seconds;
  samples_ += samples;
}

result<bool> AdaptiveSplit::after_step(collective::Communicator& comm, std::size_t done) {
  if (!options_.enabled || world_ == 1 || done % options_.period != 0)
    return false;
  const std::array<double, 2> mine{seconds_, samples_};
  std::vector<double> all(2 * static_cast<std::size_t>(world_));
  if (auto ok =
          collective::allgather(comm, {.input = std::as_bytes(std::span<const double>(mine)),
                                       .output = std::as_writable_bytes(std::span<double>(all))});
      !ok)
    return ok.error();
  seconds_ = 0;
  samples_ = 0;
  std::vector<double> throughputs(static_cast<std::size_t>(world_));
  for (int r = 0; r < world_; ++r) {
    const double s = all[2 * static_cast<std::size_t>(r)];
    throughputs[static_cast<std::size_t>(r)] =
        s > 0 ? all[2 * static_cast<std::size_t>(r) + 1] / s : 0;
  }
  auto next = proportional_split(global_, throughputs, options_.min_local_batch);
  if (next == split_)
    return false;
  split_ = std::move(next);
  history_.push_back({done, split_});
  return true;
}

}  // namespace fedcore::distributed
