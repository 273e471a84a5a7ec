// ShmRing: the shared-memory message lane between two ranks on one host.
#include "shared/collective/shm_ring.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <numeric>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <thread>
#include <unistd.h>
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

// A ring and its receiving end, opened as a peer opens it.
struct Lane {
  ShmRing sender;
  ShmRing receiver;
};
result<Lane> make_lane(std::size_t capacity) {
  auto sender = ShmRing::create(capacity);
  if (!sender)
    return sender.error();
  auto receiver = ShmRing::open(sender->name(), sender->cookie(), sender->capacity());
  if (!receiver)
    return receiver.error();
  return Lane{std::move(*sender), std::move(*receiver)};
}

// The next record the receiver finds, which must be there and carry `payload`; otherwise
// the test fails and the record is empty.
ShmRing::Record next_record(ShmRing& receiver, std::span<const std::byte> payload) {
  auto read = receiver.read();
  if (!read) {
    ADD_FAILURE() << read.error().to_string();
    return {};
  }
  if (!*read) {
    ADD_FAILURE() << "no record";
    return {};
  }
  EXPECT_TRUE(
      std::equal((*read)->payload.begin(), (*read)->payload.end(), payload.begin(), payload.end()));
  return **read;
}

bool named(const ShmRing& ring) {
  return std::filesystem::exists("/dev/shm" + ring.name());
}

TEST(ShmRing, TheReceiverSeesTheSendersRecordAndTheNameIsGoneOnceOpened) {
  auto sender = ShmRing::create(4096);
  ASSERT_TRUE(sender) << sender.error().to_string();
  EXPECT_TRUE(named(*sender));
  auto receiver = ShmRing::open(sender->name(), sender->cookie(), sender->capacity());
  ASSERT_TRUE(receiver) << receiver.error().to_string();
  EXPECT_FALSE(named(*sender));

  auto nothing = receiver->read();
  ASSERT_TRUE(nothing);
  EXPECT_FALSE(*nothing);
  const auto head = bytes(40, 9);
  const auto payload = bytes(1000, 3);
  ASSERT_TRUE(sender->try_write(head, payload));
  auto seen = receiver->read();
  ASSERT_TRUE(seen) << seen.error().to_string();
  ASSERT_TRUE(*seen);
  const ShmRing::Record& record = **seen;
  ASSERT_EQ(record.head.size(), head.size());
  EXPECT_EQ(std::memcmp(record.head.data(), head.data(), head.size()), 0);
  ASSERT_EQ(record.payload.size(), payload.size());
  EXPECT_EQ(std::memcmp(record.payload.data(), payload.data(), payload.size()), 0);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(record.payload.data()) % ShmRing::kAlignment, 0u);
  EXPECT_EQ(record.end, 64u + 1024u);  // the block, then the payload rounded up to 64
  auto again = receiver->read();
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);
  // A record without payload (a barrier's message) is one block.
  ASSERT_TRUE(sender->try_write(head, {}));
  auto empty = receiver->read();
  ASSERT_TRUE(empty && *empty);
  EXPECT_TRUE((*empty)->payload.empty());
  EXPECT_EQ((*empty)->end, 1088u + 64u);
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
  auto lane = make_lane(512);
  ASSERT_TRUE(lane);
  ShmRing& sender = lane->sender;
  ShmRing& receiver = lane->receiver;
  const auto a = bytes(64, 1), b = bytes(192, 2), c = bytes(128, 3);
  ASSERT_TRUE(sender.try_write({}, a));  // 128 bytes with its block
  ASSERT_TRUE(sender.try_write({}, b));  // 256: 384 in use, a tail of 128 left
  // c needs 192: too much for the tail, and the start is still in use.
  EXPECT_FALSE(sender.try_write({}, c));
  const auto ra = next_record(receiver, a);
  EXPECT_EQ(ra.end, 128u);
  receiver.release(ra.end);
  // The start is free now, but c from offset 0 would reach into b (at 128..384): no.
  EXPECT_FALSE(sender.try_write({}, c));
  receiver.release(next_record(receiver, b).end);
  ASSERT_TRUE(sender.try_write({}, c));
  // The ring was empty: a restart, to offset 0.
  EXPECT_EQ(next_record(receiver, c).end, 512u + 192u);
  // Too large for the ring at all: the sender sends that over the socket.
  EXPECT_FALSE(sender.try_write({}, bytes(512, 4)));
}

// A record too long for the tail, while the ring holds another, goes to offset 0 behind a
// skip block, and the receiver reads past it in order.
TEST(ShmRing, ARecordThatDoesNotFitTheTailWrapsBehindASkipBlock) {
  auto lane = make_lane(512);
  ASSERT_TRUE(lane);
  ShmRing& sender = lane->sender;
  ShmRing& receiver = lane->receiver;
  const auto a = bytes(192, 1), b = bytes(128, 2), c = bytes(64, 3);
  ASSERT_TRUE(sender.try_write({}, a));  // 0..256
  ASSERT_TRUE(sender.try_write({}, b));  // 256..448: a tail of 64 left
  const auto ra = next_record(receiver, a);
  receiver.release(ra.end);              // 0..256 free; b still held
  ASSERT_TRUE(sender.try_write({}, c));  // 128 bytes: past the tail, to offset 0
  next_record(receiver, b);
  const auto rc = next_record(receiver, c);
  EXPECT_EQ(rc.end, 512u + 128u);
  EXPECT_EQ(rc.payload.data(), ra.payload.data());  // offset 0, as a was
}

// A record written into an empty ring goes to the buffer's start (a restart), so messages
// that come one at a time reuse the same memory; one written behind it, before the
// receiver releases it, still fits (the space jumped over holds nothing).
TEST(ShmRing, AnEmptyRingStartsTheNextRecordAtTheBufferStart) {
  auto lane = make_lane(4096);
  ASSERT_TRUE(lane);
  ShmRing& sender = lane->sender;
  ShmRing& receiver = lane->receiver;
  const auto a = bytes(100, 1), b = bytes(100, 2), c = bytes(3000, 3);
  ASSERT_TRUE(sender.try_write({}, a));
  const auto ra = next_record(receiver, a);
  const std::byte* start = ra.payload.data();
  EXPECT_EQ(ra.end, 192u);
  receiver.release(ra.end);

  ASSERT_TRUE(sender.try_write({}, b));  // empty, at offset 192: restarts
  ASSERT_TRUE(sender.try_write({}, c));  // behind it: 192 + 3072 bytes in use of 4096
  const auto rb = next_record(receiver, b);
  EXPECT_EQ(rb.payload.data(), start);
  EXPECT_EQ(rb.end, 4096u + 192u);
  const auto rc = next_record(receiver, c);
  EXPECT_EQ(rc.payload.data(), start + 192);
  // Nothing more fits now: the tail (832 bytes) is too short, and the start holds b.
  const auto d = bytes(1000, 4);
  EXPECT_FALSE(sender.try_write({}, d));
  receiver.release(rc.end);
  ASSERT_TRUE(sender.try_write({}, d));  // empty again: back to the start
  EXPECT_EQ(next_record(receiver, d).payload.data(), start);
}

// Records of 128 bytes (a 64-byte block and 64 of payload) in a ring of 1024: once the
// receiver has handed back the first three of four, the start has room for the next and
// for as much again as is still held (384 >= 128 + 128), so it goes there, behind a skip
// block at 512; with only the first handed back (128 < 128 + 384) it goes on at 512.
TEST(ShmRing, ARecordGoesBackToTheStartEarlyWhenTheStartHasRoomToSpare) {
  for (const bool three_released : {true, false}) {
    SCOPED_TRACE(three_released ? "three handed back" : "one handed back");
    auto lane = make_lane(1024);
    ASSERT_TRUE(lane);
    ShmRing& sender = lane->sender;
    ShmRing& receiver = lane->receiver;
    std::vector<ShmRing::Record> read;
    for (int i = 0; i < 4; ++i) {
      const auto payload = bytes(64, i);
      ASSERT_TRUE(sender.try_write({}, payload));
      read.push_back(next_record(receiver, payload));
    }
    const std::byte* start = read[0].payload.data();
    EXPECT_EQ(read[3].payload.data(), start + 384);
    receiver.release(read[three_released ? 2 : 0].end);
    const auto next = bytes(64, 9);
    ASSERT_TRUE(sender.try_write({}, next));
    const auto r = next_record(receiver, next);
    EXPECT_EQ(r.payload.data(), three_released ? start : start + 512);
    EXPECT_EQ(r.end, three_released ? 1024u + 128u : 640u);
  }
}

// The sleeping flag the receiver sets is what the sender reads after publishing.
TEST(ShmRing, TheSenderSeesWhetherTheReceiverSleeps) {
  auto lane = make_lane(256);
  ASSERT_TRUE(lane);
  ShmRing& sender = lane->sender;
  ShmRing& receiver = lane->receiver;
  EXPECT_FALSE(sender.receiver_sleeping());
  receiver.set_sleeping(true);
  EXPECT_TRUE(sender.receiver_sleeping());
  receiver.set_sleeping(false);
  EXPECT_FALSE(sender.receiver_sleeping());
}

// A sender and a receiver on two threads, records of many sizes through a ring much smaller
// than all of them together (so it wraps and fills): every record arrives, in order, intact.
TEST(ShmRing, RecordsCrossBetweenThreadsInOrderThroughAWrappingRing) {
  auto lane = make_lane(4096);
  ASSERT_TRUE(lane);
  ShmRing& sender = lane->sender;
  ShmRing& receiver = lane->receiver;
  constexpr std::uint32_t kRecords = 20'000;
  const auto payload_of = [](std::uint32_t i) {
    return bytes((i * 37) % 1500, static_cast<int>(i));
  };
  std::thread producer([&] {
    for (std::uint32_t i = 0; i < kRecords; ++i) {
      const auto payload = payload_of(i);
      // Bounded: the receiver releases continuously; 10 s of refusals is a failure.
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!sender.try_write(std::as_bytes(std::span(&i, 1)), payload)) {
        if (std::chrono::steady_clock::now() > give_up)
          return;
        std::this_thread::yield();
      }
    }
  });
  std::uint32_t received = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (received < kRecords && std::chrono::steady_clock::now() < give_up) {
    auto record = receiver.read();
    ASSERT_TRUE(record) << record.error().to_string();
    if (!*record) {
      std::this_thread::yield();
      continue;
    }
    std::uint32_t number = 0;
    ASSERT_EQ((*record)->head.size(), sizeof(number));
    std::memcpy(&number, (*record)->head.data(), sizeof(number));
    ASSERT_EQ(number, received);
    const auto expected = payload_of(number);
    ASSERT_EQ((*record)->payload.size(), expected.size());
    // std::equal, not memcmp: an empty payload's data() may be null.
    ASSERT_TRUE(std::equal((*record)->payload.begin(), (*record)->payload.end(), expected.begin()));
    receiver.release((*record)->end);
    ++received;
  }
  producer.join();
  EXPECT_EQ(received, kRecords);
}

// The receiver checks every block against the ring before it reads: a peer that writes
// garbage into the shared memory causes data_loss, not an out-of-bounds read.
TEST(ShmRing, AMalformedRecordIsDataLoss) {
  auto sender = ShmRing::create(256);
  ASSERT_TRUE(sender);
  // A third mapping of the same memory, taken before the receiver removes the name, to
  // write what no correct sender writes.
  const int fd = shm_open(sender->name().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  constexpr std::size_t kHeader = 256;  // shm_ring.cpp's kDataOffset
  void* raw = mmap(nullptr, kHeader + 256, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(raw, MAP_FAILED);
  auto* base = static_cast<std::byte*>(raw);
  auto receiver = ShmRing::open(sender->name(), sender->cookie(), sender->capacity());
  ASSERT_TRUE(receiver);
  const auto publish = [&](std::uint64_t position) {
    // `published` is the header's third cache line (shm_ring.cpp's Header).
    std::memcpy(base + 128, &position, sizeof(position));
  };
  const auto write_block = [&](std::uint32_t kind, std::uint32_t head, std::uint64_t payload) {
    std::memcpy(base + kHeader, &kind, 4);
    std::memcpy(base + kHeader + 4, &head, 4);
    std::memcpy(base + kHeader + 8, &payload, 8);
  };
  const auto expect_data_loss = [&](const char* what) {
    auto record = receiver->read();
    ASSERT_FALSE(record) << what;
    EXPECT_EQ(record.error().code, errc::data_loss) << what;
  };
  write_block(0x12345678, 0, 0);
  publish(64);
  expect_data_loss("an unknown kind");
  write_block(0x52454331, 49, 0);  // "REC1"
  expect_data_loss("a head longer than the block");
  write_block(0x52454331, 0, 1u << 20);
  expect_data_loss("a payload longer than the ring");
  write_block(0x52454331, 0, 128);
  publish(128);
  expect_data_loss("a payload beyond what was published");
  publish(1u << 20);
  expect_data_loss("a published position further ahead than the ring holds");
  write_block(0x534b4950, 0, 0);  // "SKIP" at the only offset: nothing behind it
  publish(64);
  expect_data_loss("a skip block with nothing behind it");
  munmap(raw, kHeader + 256);
}

// A restart the sender claims (the header's `restarted_from`, next to `published`) with
// nothing published behind it is data_loss too.
TEST(ShmRing, ARestartWithNothingBehindItIsDataLoss) {
  auto sender = ShmRing::create(256);
  ASSERT_TRUE(sender);
  const int fd = shm_open(sender->name().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  void* raw = mmap(nullptr, 256, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(raw, MAP_FAILED);
  auto receiver = ShmRing::open(sender->name(), sender->cookie(), sender->capacity());
  ASSERT_TRUE(receiver);
  ASSERT_TRUE(sender->try_write({}, bytes(64, 1)));  // ends at 128
  auto first = receiver->read();
  ASSERT_TRUE(first && *first);
  receiver->release((*first)->end);
  auto* base = static_cast<std::byte*>(raw);
  const std::uint64_t restarted_from = 128, published = 192;  // the restart lands on 256
  std::memcpy(base + 136, &restarted_from, sizeof(restarted_from));
  std::memcpy(base + 128, &published, sizeof(published));
  auto record = receiver->read();
  ASSERT_FALSE(record);
  EXPECT_EQ(record.error().code, errc::data_loss);
  EXPECT_NE(record.error().message.find("restart"), std::string::npos) << record.error().message;
  munmap(raw, 256);
}

}  // namespace
}  // namespace fedcore::collective
