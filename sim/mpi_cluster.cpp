#include "sim/mpi_cluster.hpp"

#include <mpi.h>
#include <thread>

namespace fedcore::sim {
namespace {

constexpr std::chrono::milliseconds kPollEvery{5};

// Waits for `request` by testing it, sleeping between tests, until `timeout`.
result<void> wait_for(MPI_Request& request, std::chrono::milliseconds timeout, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return fail(errc::unavailable, std::string("MPI failed while waiting for ") + what);
    if (done)
      return {};
    if (std::chrono::steady_clock::now() >= deadline) {
      // The request stays pending; the job is over for this rank (its caller exits).
      return fail(errc::deadline_exceeded, std::string("the other ranks did not reach ") + what +
                                               " within " + std::to_string(timeout.count()) +
                                               " ms");
    }
    std::this_thread::sleep_for(kPollEvery);
  }
}

class MpiCluster final : public Cluster {
 public:
  MpiCluster() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }

  result<std::uint64_t> share_from_rank0(std::uint64_t value,
                                         std::chrono::milliseconds timeout) override {
    unsigned long long shared = value;
    MPI_Request request{};
    MPI_Ibcast(&shared, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD, &request);
    if (auto ok = wait_for(request, timeout, "rank 0's server address"); !ok)
      return ok.error();
    return static_cast<std::uint64_t>(shared);
  }

  result<void> barrier(std::chrono::milliseconds timeout) override {
    MPI_Request request{};
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    return wait_for(request, timeout, "the end of the run");
  }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Cluster> mpi_world_cluster() {
  return std::make_unique<MpiCluster>();
}

}  // namespace fedcore::sim
