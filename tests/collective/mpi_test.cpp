// The collectives over the MPI transport. Run by ctest under mpirun with 3 ranks (see
// tests/collective/CMakeLists.txt); every rank runs every test.
#include <gtest/gtest.h>

#include "shared/collective/collectives.hpp"
#include "shared/collective/mpi_transport.hpp"

namespace fedcore::collective {
namespace {

using namespace std::chrono_literals;

Communicator make_comm(const std::string& job, std::chrono::milliseconds timeout = 20s) {
  return Communicator(make_mpi_transport(MPI_COMM_WORLD), job, timeout);
}

float value(int rank, std::size_t i) {
  return static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 17));
}

TEST(Mpi, AllreduceBroadcastAllgatherMatchTheReference) {
  auto comm = make_comm("mpi-test");
  const int p = comm.size();
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1001}, std::size_t{300'000}}) {
    std::vector<float> data(n), expected(n, 0.0f);
    for (std::size_t i = 0; i < n; ++i) {
      data[i] = value(comm.rank(), i);
      for (int r = 0; r < p; ++r)
        expected[i] += value(r, i);
    }
    auto ok = allreduce(comm, {.data = data, .max_segment_bytes = 4096});
    ASSERT_TRUE(ok) << ok.error().to_string();
    EXPECT_EQ(data, expected) << "n=" << n;

    std::vector<float> b(n, comm.rank() == 1 ? 5.0f : -1.0f);
    ok = broadcast(comm, {.data = std::as_writable_bytes(std::span<float>(b)), .root = 1 % p});
    ASSERT_TRUE(ok) << ok.error().to_string();
    EXPECT_EQ(b, std::vector<float>(n, p > 1 ? 5.0f : -1.0f));

    std::vector<float> in(n, float(comm.rank())), out(n * p);
    ok = allgather(comm, {.input = std::as_bytes(std::span<const float>(in)),
                          .output = std::as_writable_bytes(std::span<float>(out))});
    ASSERT_TRUE(ok) << ok.error().to_string();
    for (int r = 0; r < p; ++r) {
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(out[r * n + i], float(r));
    }
  }
  ASSERT_TRUE(barrier(comm));
}

TEST(Mpi, TaggedSendRecvAroundTheRing) {
  auto comm = make_comm("mpi-p2p");
  const int p = comm.size();
  if (p == 1)
    GTEST_SKIP() << "needs two ranks";
  const int right = (comm.rank() + 1) % p, left = (comm.rank() + p - 1) % p;
  std::vector<int> out(100, comm.rank()), in(100, -1);
  ASSERT_TRUE(
      send(comm, {.peer = right, .tag = 3, .data = std::as_bytes(std::span<const int>(out))}));
  ASSERT_TRUE(
      recv(comm, {.peer = left, .tag = 3, .data = std::as_writable_bytes(std::span<int>(in))}));
  EXPECT_EQ(in, std::vector<int>(100, left));
}

// Rank 0 calls allreduce with another length: every rank fails (a desync where the bad
// envelope arrives, a deadline elsewhere), none returns data.
TEST(Mpi, SizeDesyncFailsEveryRank) {
  auto comm = make_comm("mpi-desync", 2s);
  if (comm.size() == 1)
    GTEST_SKIP() << "needs two ranks";
  std::vector<float> data(comm.rank() == 0 ? 30 : 33, 1.0f);
  auto ok = allreduce(comm, {.data = data});
  ASSERT_FALSE(ok);
  EXPECT_TRUE(ok.error().code == errc::aborted || ok.error().code == errc::deadline_exceeded)
      << ok.error().to_string();
  // Keep the ranks together before the next test's communicator.
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace fedcore::collective

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    // Only rank 0 prints progress; every rank's failures still reach the exit status.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
