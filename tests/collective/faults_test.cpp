// Timeouts, dead peers and desyncs: every rank must fail with the specific error within
// the operation deadline — never hang and never return wrong data.
#include <algorithm>
#include <atomic>
#include <latch>
#include <mutex>

#include <gtest/gtest.h>

#include "shared/collective/collectives.hpp"
#include "tests/collective/group_support.hpp"

namespace fedcore::collective {
namespace {

using namespace std::chrono_literals;
using testing::Kind;
using SteadyClock = std::chrono::steady_clock;

class Faults : public ::testing::TestWithParam<Kind> {};

// Rank 1 does not take part until rank 0 has given up: rank 0 must fail with
// deadline_exceeded after its own timeout, not before and not much later.
TEST_P(Faults, SilentPeerMakesTheOperationTimeOut) {
  std::latch rank0_done(1);
  testing::run_group(GetParam(), 2, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      rank0_done.wait();
      return;
    }
    std::vector<float> data(100, 1.0f);
    const auto start = SteadyClock::now();
    auto ok = allreduce(comm, {.data = data, .timeout = 300ms});
    const auto elapsed = SteadyClock::now() - start;
    rank0_done.count_down();
    ASSERT_FALSE(ok);
    EXPECT_EQ(ok.error().code, errc::deadline_exceeded) << ok.error().to_string();
    EXPECT_GE(elapsed, 300ms);
    EXPECT_LT(elapsed, 5s);
    // The communicator is dead afterwards.
    auto again = barrier(comm);
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().code, errc::aborted);
  });
}

// Rank 2 of 3 leaves (its transport is destroyed) instead of joining the allreduce: the
// others fail with unavailable, long before their 10 s deadline.
TEST_P(Faults, DeadPeerFailsTheOthersWellBeforeTheDeadline) {
  std::atomic<int> unavailable{0};
  testing::run_group(GetParam(), 3, [&](Communicator& comm) {
    ASSERT_TRUE(barrier(comm));
    if (comm.rank() == 2)
      return;  // dies: the communicator and its links go away
    std::vector<float> data(50'000, 1.0f);
    const auto start = SteadyClock::now();
    auto ok = allreduce(comm, {.data = data, .timeout = 10s});
    const auto elapsed = SteadyClock::now() - start;
    ASSERT_FALSE(ok);
    EXPECT_TRUE(ok.error().code == errc::unavailable || ok.error().code == errc::aborted)
        << ok.error().to_string();
    if (ok.error().code == errc::unavailable)
      ++unavailable;
    EXPECT_LT(elapsed, 5s);
  });
  EXPECT_GE(unavailable.load(), 1);
}

// Rank 2 calls allreduce with a different length: every rank fails (aborted on a rank
// that saw the bad envelope, unavailable or aborted on the others), none returns data.
TEST_P(Faults, SizeDesyncFailsEveryRankWithoutWaitingForTheDeadline) {
  std::atomic<int> desync_seen{0};
  testing::run_group(GetParam(), 3, [&](Communicator& comm) {
    std::vector<float> data(comm.rank() == 2 ? 90 : 99, 1.0f);
    const auto start = SteadyClock::now();
    auto ok = allreduce(comm, {.data = data, .timeout = 10s});
    const auto elapsed = SteadyClock::now() - start;
    ASSERT_FALSE(ok) << "rank " << comm.rank() << " returned a result";
    EXPECT_TRUE(ok.error().code == errc::aborted || ok.error().code == errc::unavailable)
        << ok.error().to_string();
    if (ok.error().message.find("desync") != std::string::npos)
      ++desync_seen;
    EXPECT_LT(elapsed, 5s);
  });
  EXPECT_GE(desync_seen.load(), 1);
}

// Rank 1 calls broadcast while the others call allreduce: an op-type desync.
TEST_P(Faults, OperationDesyncFailsEveryRank) {
  std::atomic<int> failed{0};
  testing::run_group(GetParam(), 2, [&](Communicator& comm) {
    std::vector<float> data(64, 1.0f);
    result<void> ok;
    if (comm.rank() == 1) {
      ok = broadcast(
          comm,
          {.data = std::as_writable_bytes(std::span<float>(data)), .root = 1, .timeout = 10s});
    } else {
      ok = allreduce(comm, {.data = data, .timeout = 10s});
    }
    if (!ok)
      ++failed;
  });
  EXPECT_EQ(failed.load(), 2);
}

// A rank that skipped an operation is out of sequence: the envelope's sequence number
// differs, so the next operation fails even though type and size match.
TEST_P(Faults, SkippedOperationIsASequenceDesync) {
  std::atomic<int> failed{0};
  testing::run_group(GetParam(), 2, [&](Communicator& comm) {
    std::vector<float> data(10, 1.0f);
    if (comm.rank() == 0) {
      (void)comm.begin(OpType::allreduce, 0);  // burns sequence number 1
    }
    auto ok = allreduce(comm, {.data = data, .timeout = 10s});
    if (!ok) {
      ++failed;
      EXPECT_TRUE(ok.error().code == errc::aborted || ok.error().code == errc::unavailable);
    }
  });
  EXPECT_EQ(failed.load(), 2);
}

INSTANTIATE_TEST_SUITE_P(Transports, Faults,
                         ::testing::Values(Kind::inproc, Kind::tcp, Kind::tls, Kind::tcp_shm),
                         [](const auto& info) {
                           return std::string(testing::kind_name(info.param));
                         });

TEST(NetSetup, PeerOfAnotherJobIsRefused) {
  testing::GroupOptions options;
  options.jobs = {"job-a", "job-b"};
  options.connect_timeout = 2s;
  auto results = testing::connect_only(Kind::tcp, 2, options);
  // Rank 1 dials rank 0 and is refused; rank 0 waits for a link that never comes.
  ASSERT_FALSE(results[1]);
  EXPECT_EQ(results[1].error().code, errc::permission_denied) << results[1].error().to_string();
  EXPECT_NE(results[1].error().message.find("wrong job"), std::string::npos);
  ASSERT_FALSE(results[0]);
  EXPECT_EQ(results[0].error().code, errc::deadline_exceeded);
}

// Shared memory is per pair and per direction: a rank that has it off (as a rank on
// another host could not open the rings) leaves its links on the sockets, while the
// ranks that have it on use rings between themselves. Sums are right either way.
TEST(NetSetup, RanksWithoutSharedMemoryTalkOverTheirSocketsAndTheOthersUseRings) {
  testing::GroupOptions options;
  options.ring_bytes = {1u << 20, 0, 1u << 20};
  std::vector<std::uint64_t> ring_bytes(3);
  std::mutex m;
  testing::run_group(
      Kind::tcp, 3,
      [&](Communicator& comm) {
        std::vector<float> data(100'000, static_cast<float>(comm.rank() + 1));
        auto ok = allreduce(comm, {.data = data, .max_segment_bytes = 16 * 1024});
        ASSERT_TRUE(ok) << ok.error().to_string();
        EXPECT_EQ(data.front(), 6.0f);
        EXPECT_EQ(data.back(), 6.0f);
        std::lock_guard lock(m);
        ring_bytes[comm.rank()] = comm.transport().bytes_sent_shared_memory();
      },
      options);
  // The ring sends to the right: 0 -> 1 and 1 -> 2 touch rank 1, 2 -> 0 does not.
  EXPECT_EQ(ring_bytes[0], 0u);
  EXPECT_EQ(ring_bytes[1], 0u);
  EXPECT_GT(ring_bytes[2], 0u);
}

// A message handed back with Transport::release frees its place in the ring at once: the
// next message, sent after the receiver said so, finds the ring empty and goes where the
// first one was (shm_ring.hpp, "Space"). Without the release the receiver would still hold
// each message until its next recv, and each would land behind the one before.
TEST(SharedMemoryLane, AMessageHandedBackLetsTheNextOneTakeItsPlace) {
  testing::GroupOptions options;
  options.ring_bytes = {1u << 20, 1u << 20};
  std::vector<const std::byte*> places;
  testing::run_group(
      Kind::tcp, 2,
      [&](Communicator& comm) {
        Transport& t = comm.transport();
        ASSERT_GT(t.shared_memory_link_bytes(1 - comm.rank()), 0u);
        const auto deadline = SteadyClock::now() + 20s;
        const std::vector<std::byte> payload(1000, std::byte{7});
        for (std::uint64_t i = 0; i < 3; ++i) {
          Envelope message{comm.job(), i, OpType::send_recv, 1, payload.size(), 0, payload.size()};
          Envelope ack{comm.job(), i, OpType::send_recv, 2, 0, 0, 0};
          if (comm.rank() == 0) {
            t.post_send(1, message, payload);
            ASSERT_TRUE(t.wait_sends(deadline));
            auto got = t.recv(1, ack, deadline);
            ASSERT_TRUE(got) << got.error().to_string();
            t.release(1);
          } else {
            auto got = t.recv(0, message, deadline);
            ASSERT_TRUE(got) << got.error().to_string();
            ASSERT_EQ(got->size(), payload.size());
            EXPECT_EQ((*got)[999], std::byte{7});
            places.push_back(got->data());
            t.release(0);
            t.post_send(0, ack, {});
            ASSERT_TRUE(t.wait_sends(deadline));
          }
        }
      },
      options);
  ASSERT_EQ(places.size(), 3u);
  EXPECT_EQ(places[1], places[0]);
  EXPECT_EQ(places[2], places[0]);
}

// Two ranks that share memory take recursive doubling above kRecursiveDoublingMaxBytes,
// in segments, while a segment fits in half the smaller ring, and the ring beyond: both
// ends see the same two rings, so they agree even when their own rings differ. Each case
// pins the expected algorithm and segment size on rank 0 only and lets rank 1 choose
// (asked for 1 MiB segments): a different choice would desynchronize the two (other steps
// or other segments) and fail the allreduce.
constexpr std::size_t kMiB = std::size_t{1} << 20;

struct SharedMemoryChoice {
  std::vector<std::size_t> ring_bytes;
  std::size_t buffer_bytes;
  AllreduceAlgorithm expected;
  std::size_t expected_segment_bytes;
};

class TwoRanksSharingMemory : public ::testing::TestWithParam<SharedMemoryChoice> {};

TEST_P(TwoRanksSharingMemory, ChooseTheSameAlgorithmOnBothEnds) {
  const auto& c = GetParam();
  testing::GroupOptions options;
  options.ring_bytes = c.ring_bytes;
  std::vector<std::size_t> link_bytes(2);
  std::mutex m;
  testing::run_group(
      Kind::tcp, 2,
      [&](Communicator& comm) {
        std::vector<float> data(c.buffer_bytes / sizeof(float),
                                static_cast<float>(comm.rank() + 1));
        const bool pinned = comm.rank() == 0;
        auto ok =
            allreduce(comm, {.data = data,
                             .timeout = std::chrono::seconds(20),
                             .max_segment_bytes = pinned ? c.expected_segment_bytes : kMiB,
                             .algorithm = pinned ? c.expected : AllreduceAlgorithm::automatic});
        ASSERT_TRUE(ok) << ok.error().to_string();
        EXPECT_EQ(data.front(), 3.0f);
        EXPECT_EQ(data.back(), 3.0f);
        std::lock_guard lock(m);
        link_bytes[comm.rank()] = comm.transport().shared_memory_link_bytes(1 - comm.rank());
      },
      options);
  EXPECT_EQ(link_bytes[0], link_bytes[1]);
  EXPECT_EQ(link_bytes[0], std::min(c.ring_bytes[0], c.ring_bytes[1]));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TwoRanksSharingMemory,
    ::testing::Values(
        // 1.5 MiB in 4 MiB rings: recursive doubling in 1 MiB segments, though the whole
        // buffer would fit.
        SharedMemoryChoice{
            {4 * kMiB, 4 * kMiB}, 3 * kMiB / 2, AllreduceAlgorithm::recursive_doubling, kMiB},
        // 512 KiB, less than a segment: one.
        SharedMemoryChoice{
            {4 * kMiB, 4 * kMiB}, kMiB / 2, AllreduceAlgorithm::recursive_doubling, kMiB / 2},
        // Exactly half the ring still holds a segment.
        SharedMemoryChoice{
            {2 * kMiB, 2 * kMiB}, 4 * kMiB, AllreduceAlgorithm::recursive_doubling, kMiB},
        // Rank 1's ring is 1 MiB: a 1 MiB segment is more than half of it, so the ring,
        // on both.
        SharedMemoryChoice{{4 * kMiB, kMiB}, 4 * kMiB, AllreduceAlgorithm::ring, kMiB},
        // No shared memory on rank 0: sockets, the ring.
        SharedMemoryChoice{{0, 4 * kMiB}, 4 * kMiB, AllreduceAlgorithm::ring, kMiB}));

// Four ranks take recursive doubling up to kRecursiveDoublingMaxBytesBeyondTwo and
// halving-doubling above it. Rank 0 pins the expected algorithm and the others choose:
// recursive doubling and halving-doubling pair ranks differently and send different
// sizes, so a different choice fails the allreduce.
struct FourRankChoice {
  std::size_t buffer_bytes;
  AllreduceAlgorithm expected;
};

class FourRanks : public ::testing::TestWithParam<FourRankChoice> {};

TEST_P(FourRanks, ChooseRecursiveDoublingForSmallBuffersAndHalvingDoublingAbove) {
  const auto& c = GetParam();
  testing::run_group(Kind::tcp, 4, [&](Communicator& comm) {
    std::vector<float> data(c.buffer_bytes / sizeof(float), static_cast<float>(comm.rank()));
    const auto algorithm = comm.rank() == 0 ? c.expected : AllreduceAlgorithm::automatic;
    auto ok = allreduce(comm, {.data = data, .timeout = 5s, .algorithm = algorithm});
    ASSERT_TRUE(ok) << ok.error().to_string();
    EXPECT_EQ(data.front(), 6.0f);
    EXPECT_EQ(data.back(), 6.0f);
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, FourRanks,
                         ::testing::Values(FourRankChoice{kRecursiveDoublingMaxBytesBeyondTwo,
                                                          AllreduceAlgorithm::recursive_doubling},
                                           FourRankChoice{
                                               kRecursiveDoublingMaxBytesBeyondTwo + sizeof(float),
                                               AllreduceAlgorithm::halving_doubling},
                                           FourRankChoice{kRecursiveDoublingMaxBytes,
                                                          AllreduceAlgorithm::halving_doubling}));

}  // namespace
}  // namespace fedcore::collective
