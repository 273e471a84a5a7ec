// ShmRing: the shared-memory payload lane between two ranks on one host.
#include "shared/collective/shm_ring.hpp"

#include <cstring>
#include <filesystem>
#include <numeric>
#include <sys/statvfs.h>
#include <vector>

#include <gtest/gtest.h>

namespace fedcore::collective {
namespace {

std::vector<std::byte> bytes(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::byte>((i * 7 + seed) & 0xff);
  return v;
}

bool named(const ShmRing& ring) {
  return std::filesystem::exists("/dev/shm" + ring.name());
}

TEST(ShmRing, TheReceiverSeesTheSendersBytesAndTheNameIsGoneOnceOpened) {
  auto sender = ShmRing::create(4096);
  ASSERT_TRUE(sender) << sender.error().to_string();
  EXPECT_TRUE(named(*sender));
  auto receiver = ShmRing::open(sender->name(), sender->cookie(), sender->capacity());
  ASSERT_TRUE(receiver) << receiver.error().to_string();
  EXPECT_FALSE(named(*sender));

  const auto payload = bytes(1000, 3);
  auto placed = sender->try_write(payload);
  ASSERT_TRUE(placed);
  EXPECT_EQ(placed->offset, 0u);
  EXPECT_EQ(placed->end, 1024u);  // rounded up to the 64-byte alignment
  auto seen = receiver->view(*placed, payload.size());
  ASSERT_TRUE(seen) << seen.error().to_string();
  ASSERT_EQ(seen->size(), payload.size());
  EXPECT_EQ(std::memcmp(seen->data(), payload.data(), payload.size()), 0);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(seen->data()) % ShmRing::kAlignment, 0u);
}

TEST(ShmRing, ARingNobodyOpenedLeavesNoNameBehind) {
  std::string name;
  {
    auto ring = ShmRing::create(4096);
    ASSERT_TRUE(ring);
    name = ring->name();
    EXPECT_TRUE(std::filesystem::exists("/dev/shm" + name));
  }
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + name));
}

TEST(ShmRing, AWrongCookieOrSizeOrNameIsRefused) {
  auto sender = ShmRing::create(4096);
  ASSERT_TRUE(sender);
  auto missing = ShmRing::open("/fedcore-ring-does-not-exist", 1, 4096);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::not_found);
  auto malformed = ShmRing::open("../etc/passwd", 1, 4096);
  ASSERT_FALSE(malformed);
  EXPECT_EQ(malformed.error().code, errc::invalid_argument);
  auto wrong_size = ShmRing::open(sender->name(), sender->cookie(), 8192);
  ASSERT_FALSE(wrong_size);
  EXPECT_EQ(wrong_size.error().code, errc::invalid_argument) << wrong_size.error().to_string();
}

// A /dev/shm too small for a ring is an error when the ring is made (the pair then uses
// its socket), not a SIGBUS when a page is first written. tmpfs refuses a reservation
// larger than its whole size at once, without allocating anything first.
TEST(ShmRing, ARingLargerThanDevShmIsRefusedWhenMade) {
  struct statvfs fs {};
  ASSERT_EQ(statvfs("/dev/shm", &fs), 0);
  if (fs.f_blocks == 0)
    GTEST_SKIP() << "/dev/shm has no size limit here";
  const std::size_t too_big = static_cast<std::size_t>(fs.f_blocks) * fs.f_frsize + (1u << 20);
  auto ring = ShmRing::create(too_big);
  ASSERT_FALSE(ring);
  EXPECT_EQ(ring.error().code, errc::io_error);
  EXPECT_NE(ring.error().message.find("reserving"), std::string::npos) << ring.error().message;
}

TEST(ShmRing, AWrongCookieIsRefused) {
  auto sender = ShmRing::create(4096);
  ASSERT_TRUE(sender);
  auto wrong = ShmRing::open(sender->name(), sender->cookie() + 1, sender->capacity());
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, errc::invalid_argument);
  EXPECT_NE(wrong.error().message.find("not the one offered"), std::string::npos);
}

TEST(ShmRing, AFullRingRefusesUntilTheReceiverReleasesAndThenWrapsToTheStart) {
  auto sender = ShmRing::create(256);
  ASSERT_TRUE(sender);
  auto receiver = ShmRing::open(sender->name(), sender->cookie(), sender->capacity());
  ASSERT_TRUE(receiver);
  const auto a = bytes(64, 1), b = bytes(128, 2), c = bytes(128, 3);
  auto pa = sender->try_write(a);
  auto pb = sender->try_write(b);
  ASSERT_TRUE(pa && pb);
  EXPECT_EQ(pb->offset, 64u);
  // 64 bytes are left at the end, too few for c; the start is still in use.
  EXPECT_FALSE(sender->try_write(c));
  ASSERT_TRUE(receiver->view(*pa, a.size()));
  receiver->release(pa->end);
  // The start is free now, but c would still overlap b from offset 0 up to 128: no.
  EXPECT_FALSE(sender->try_write(c));
  ASSERT_TRUE(receiver->view(*pb, b.size()));
  receiver->release(pb->end);
  auto pc = sender->try_write(c);
  ASSERT_TRUE(pc);
  EXPECT_EQ(pc->offset, 0u);  // the 64-byte tail was skipped
  EXPECT_EQ(pc->end, 256u + 128u);
  auto seen = receiver->view(*pc, c.size());
  ASSERT_TRUE(seen);
  EXPECT_EQ(std::memcmp(seen->data(), c.data(), c.size()), 0);
  // Too large for the ring at all, or empty: the sender sends those over the socket.
  EXPECT_FALSE(sender->try_write(bytes(512, 4)));
  EXPECT_FALSE(sender->try_write({}));
}

TEST(ShmRing, APlacementNoSenderMadeIsDataLoss) {
  auto sender = ShmRing::create(256);
  ASSERT_TRUE(sender);
  auto receiver = ShmRing::open(sender->name(), sender->cookie(), sender->capacity());
  ASSERT_TRUE(receiver);
  const auto expect_data_loss = [&](ShmRing::Placement p, std::uint64_t length) {
    auto seen = receiver->view(p, length);
    ASSERT_FALSE(seen) << "offset " << p.offset << " end " << p.end;
    EXPECT_EQ(seen.error().code, errc::data_loss);
  };
  expect_data_loss({256, 320}, 64);     // past the end
  expect_data_loss({192, 320}, 128);    // runs past the end
  expect_data_loss({8, 72}, 64);        // misaligned
  expect_data_loss({0, 64}, 0);         // empty
  expect_data_loss({64, 64}, 64);       // end does not match offset and length
  expect_data_loss({0, 1u << 20}, 64);  // further ahead than the ring holds
  ASSERT_TRUE(receiver->view({0, 64}, 64));
  expect_data_loss({0, 64}, 64);  // the same placement twice
}

}  // namespace
}  // namespace fedcore::collective
