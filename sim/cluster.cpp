#include "sim/cluster.hpp"

namespace fedcore::sim {
namespace {

class SingleProcess final : public Cluster {
 public:
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return 1; }
  result<std::uint64_t> share_from_rank0(std::uint64_t value, std::chrono::milliseconds) override {
    return value;
  }
  result<void> barrier(std::chrono::milliseconds) override { return {}; }
};

}  // namespace

std::unique_ptr<Cluster> single_process_cluster() {
  return std::make_unique<SingleProcess>();
}

SiteRange sites_of(std::size_t clients, int rank, int size) noexcept {
  const auto r = static_cast<std::size_t>(rank);
  const auto k = static_cast<std::size_t>(size);
  return {clients * r / k, clients * (r + 1) / k};
}

}  // namespace fedcore::sim
