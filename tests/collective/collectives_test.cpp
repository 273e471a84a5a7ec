// Every collective on world sizes {1,2,3,4,7} × element counts {0,1,odd,large} × the
// in-process, TCP and TLS transports (each also with shared-memory rings), checked against a
// reference computed locally. Values are small integers so every sum is exact and results can be
// compared with ==.
#include "shared/collective/collectives.hpp"

#include <cstring>
#include <mutex>
#include <numeric>
#include <tuple>

#include <gtest/gtest.h>

#include "shared/util/checksum.hpp"
#include "tests/collective/group_support.hpp"

namespace fedcore::collective {
namespace {

using testing::Kind;

float value(int rank, std::size_t i) {
  return static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 17));
}

std::vector<float> contribution(int rank, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = value(rank, i);
  return v;
}

std::vector<float> reference_sum(int size, std::size_t n) {
  std::vector<float> v(n, 0.0f);
  for (int r = 0; r < size; ++r) {
    for (std::size_t i = 0; i < n; ++i)
      v[i] += value(r, i);
  }
  return v;
}

constexpr std::size_t kCounts[] = {0, 1, 1001, 300'000};
// Small segments so every count above 1 takes the multi-segment paths.
constexpr std::size_t kSegment = 4096;
// automatic picks recursive doubling for the small counts and the ring for 300,000.
constexpr AllreduceAlgorithm kAlgorithms[] = {AllreduceAlgorithm::automatic,
                                              AllreduceAlgorithm::ring,
                                              AllreduceAlgorithm::recursive_doubling};

class Grid : public ::testing::TestWithParam<std::tuple<Kind, int>> {};

TEST_P(Grid, AllreduceSumAndAverageEqualReferenceOnEveryRank) {
  const auto [kind, size] = GetParam();
  std::mutex m;
  std::vector<std::uint32_t> checksums(size);
  testing::run_group(kind, size, [&](Communicator& comm) {
    for (auto algorithm : kAlgorithms) {
      for (std::size_t n : kCounts) {
        auto data = contribution(comm.rank(), n);
        auto ok = allreduce(comm, {.data = data,
                                   .op = ReduceOp::sum,
                                   .max_segment_bytes = kSegment,
                                   .algorithm = algorithm});
        ASSERT_TRUE(ok) << ok.error().to_string();
        EXPECT_EQ(data, reference_sum(size, n)) << "rank " << comm.rank() << " n=" << n;

        auto avg = contribution(comm.rank(), n);
        ok = allreduce(comm, {.data = avg, .op = ReduceOp::average, .algorithm = algorithm});
        ASSERT_TRUE(ok) << ok.error().to_string();
        auto expected = reference_sum(size, n);
        for (float& x : expected)
          x /= static_cast<float>(size);
        EXPECT_EQ(avg, expected) << "rank " << comm.rank() << " n=" << n;
      }
    }
    // Non-integer values: sums are rounded, but every rank must hold the same bits, with
    // either algorithm (recursive doubling's partners add the same two operands).
    std::vector<float> noisy(777), noisy_rd(777);
    for (std::size_t i = 0; i < noisy.size(); ++i)
      noisy[i] = noisy_rd[i] = 0.1f * (comm.rank() + 1) + 1e-3f * i;
    ASSERT_TRUE(allreduce(comm, {.data = noisy,
                                 .op = ReduceOp::average,
                                 .max_segment_bytes = 64,
                                 .algorithm = AllreduceAlgorithm::ring}));
    auto rd = allreduce(comm, {.data = noisy_rd,
                               .op = ReduceOp::sum,
                               .max_segment_bytes = 64,
                               .algorithm = AllreduceAlgorithm::recursive_doubling});
    ASSERT_TRUE(rd) << rd.error().to_string();
    noisy.insert(noisy.end(), noisy_rd.begin(), noisy_rd.end());
    std::vector<float> noisy_hd(1001);
    for (std::size_t i = 0; i < noisy_hd.size(); ++i)
      noisy_hd[i] = 0.3f * (comm.rank() + 1) - 7e-4f * i;
    auto hd = allreduce(comm, {.data = noisy_hd,
                               .op = ReduceOp::average,
                               .max_segment_bytes = 64,
                               .algorithm = AllreduceAlgorithm::halving_doubling});
    ASSERT_TRUE(hd) << hd.error().to_string();
    noisy.insert(noisy.end(), noisy_hd.begin(), noisy_hd.end());
    // The rings carried the large operations' payloads, and only with shared memory on.
    if (testing::uses_rings(kind) && size > 1)
      EXPECT_GT(comm.transport().bytes_sent_shared_memory(), 0u);
    else
      EXPECT_EQ(comm.transport().bytes_sent_shared_memory(), 0u);
    std::lock_guard lock(m);
    checksums[comm.rank()] = crc32(std::as_bytes(std::span<const float>(noisy)));
  });
  for (int r = 1; r < size; ++r)
    EXPECT_EQ(checksums[r], checksums[0]) << "rank " << r;
}

TEST_P(Grid, ReduceScatterLeavesEachRankItsReducedChunk) {
  const auto [kind, size] = GetParam();
  testing::run_group(kind, size, [&, size = size](Communicator& comm) {
    for (std::size_t n : kCounts) {
      auto data = contribution(comm.rank(), n);
      auto mine = reduce_scatter(comm, {.data = data, .max_segment_bytes = kSegment});
      ASSERT_TRUE(mine) << mine.error().to_string();
      const Range chunk = chunk_range(n, size, comm.rank());
      const auto reference = reference_sum(size, n);
      ASSERT_EQ(mine->size(), chunk.size);
      EXPECT_EQ(mine->data(), data.data() + chunk.begin);
      EXPECT_TRUE(std::equal(mine->begin(), mine->end(), reference.begin() + chunk.begin))
          << "n=" << n;
    }
  });
}

TEST_P(Grid, BroadcastFromEveryRootCopiesTheRootsBytes) {
  const auto [kind, size] = GetParam();
  testing::run_group(kind, size, [&, size = size](Communicator& comm) {
    for (std::size_t n : kCounts) {
      for (int root = 0; root < size; root += (size > 3 ? 3 : 1)) {
        auto data = contribution(comm.rank(), n);
        auto ok = broadcast(comm, {.data = std::as_writable_bytes(std::span<float>(data)),
                                   .root = root,
                                   .max_segment_bytes = kSegment});
        ASSERT_TRUE(ok) << ok.error().to_string();
        EXPECT_EQ(data, contribution(root, n)) << "rank " << comm.rank() << " root " << root;
      }
    }
  });
}

TEST_P(Grid, AllgatherPlacesEveryRanksBlockAtItsOffset) {
  const auto [kind, size] = GetParam();
  testing::run_group(kind, size, [&, size = size](Communicator& comm) {
    for (std::size_t n : kCounts) {
      const auto input = contribution(comm.rank(), n);
      std::vector<float> output(n * size, -1.0f);
      auto ok = allgather(comm, {.input = std::as_bytes(std::span<const float>(input)),
                                 .output = std::as_writable_bytes(std::span<float>(output)),
                                 .max_segment_bytes = kSegment});
      ASSERT_TRUE(ok) << ok.error().to_string();
      for (int r = 0; r < size; ++r) {
        const auto expected = contribution(r, n);
        EXPECT_TRUE(std::equal(expected.begin(), expected.end(), output.begin() + r * n))
            << "block " << r << " n=" << n;
      }
    }
  });
}

TEST_P(Grid, BarrierAndTaggedSendRecvAroundTheRing) {
  const auto [kind, size] = GetParam();
  testing::run_group(kind, size, [&, size = size](Communicator& comm) {
    ASSERT_TRUE(barrier(comm));
    if (size == 1)
      return;
    const int right = (comm.rank() + 1) % size;
    const int left = (comm.rank() + size - 1) % size;
    for (std::size_t n : kCounts) {
      const auto out = contribution(comm.rank(), n);
      auto sent =
          send(comm, {.peer = right, .tag = 7, .data = std::as_bytes(std::span<const float>(out))});
      ASSERT_TRUE(sent) << sent.error().to_string();
      std::vector<float> in(n);
      auto got = recv(
          comm, {.peer = left, .tag = 7, .data = std::as_writable_bytes(std::span<float>(in))});
      ASSERT_TRUE(got) << got.error().to_string();
      EXPECT_EQ(in, contribution(left, n));
    }
    ASSERT_TRUE(barrier(comm));
  });
}

std::string grid_name(const ::testing::TestParamInfo<std::tuple<Kind, int>>& info) {
  return std::string(testing::kind_name(std::get<0>(info.param))) + "_world" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Transports, Grid,
                         ::testing::Combine(::testing::Values(Kind::inproc, Kind::tcp, Kind::tls,
                                                              Kind::tcp_shm, Kind::tls_shm),
                                            ::testing::Values(1, 2, 3, 4, 7)),
                         grid_name);

TEST(ChunkRange, CoversTheBufferWithNearlyEqualChunks) {
  std::size_t next = 0;
  for (std::size_t i = 0; i < 7; ++i) {
    const Range r = chunk_range(100, 7, i);
    EXPECT_EQ(r.begin, next);
    EXPECT_TRUE(r.size == 14 || r.size == 15);
    next += r.size;
  }
  EXPECT_EQ(next, 100u);
  EXPECT_EQ(chunk_range(2, 4, 3).size, 0u);
}

}  // namespace
}  // namespace fedcore::collective
