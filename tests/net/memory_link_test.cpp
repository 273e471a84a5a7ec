// MemoryLink: frames between two io_contexts on their own threads, the close and deadline
// semantics a session relies on, and no file descriptor per link.
#include "shared/net/memory_link.hpp"

#include <atomic>
#include <filesystem>
#include <future>
#include <malloc.h>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <gtest/gtest.h>

namespace fedcore::net {
namespace {
namespace asio = boost::asio;
using namespace std::chrono_literals;
using protocol::MessageType;

// An io_context run by its own thread until the object goes.
class Loop {
 public:
  Loop() : guard_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~Loop() { stop(); }
  // Ends the thread; the io_context stays for what still refers to it. Idempotent.
  void stop() {
    if (thread_.joinable()) {
      guard_.reset();
      io_.stop();
      thread_.join();
    }
  }
  asio::any_io_executor executor() { return io_.get_executor(); }
  asio::io_context& io() { return io_; }

  // Runs `work` on this loop and waits for its result (bounded by the caller's futures).
  template <class F>
  auto run(F work) {
    return asio::co_spawn(io_, std::move(work), asio::use_future);
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

// Declared after the link: stops both loops before the link's ends go, so an end is
// destroyed after everything that ran on its thread (as a session drops its link).
struct StopLoopsFirst {
  Loop& a;
  Loop& b;
  ~StopLoopsFirst() {
    a.stop();
    b.stop();
  }
};

template <class T>
T await(std::future<T>& future) {
  if (future.wait_for(10s) != std::future_status::ready) {
    ADD_FAILURE() << "no result within 10 s";
    std::abort();  // a hung link would otherwise hang the suite
  }
  return future.get();
}

SharedPayload floats(std::vector<float> values) {
  return std::make_shared<const std::vector<float>>(std::move(values));
}

TEST(MemoryLink, FramesCrossBetweenThreadsWholeAndInOrder) {
  Loop a, b;
  auto link = make_memory_link(a.executor(), b.executor());
  StopLoopsFirst stop_first{a, b};
  constexpr int kFrames = 2'000;
  // The reader parks before most frames arrive, so both the queued and the wake-up paths run.
  auto reading = b.run([&]() -> asio::awaitable<std::vector<std::string>> {
    std::vector<std::string> seen;
    for (int i = 0; i < kFrames; ++i) {
      auto frame = co_await link.second->read_frame();
      if (!frame) {
        seen.push_back("error: " + frame.error().message);
        break;
      }
      const auto expected_floats = static_cast<std::size_t>(i % 7);
      if (frame->type != MessageType::update ||
          frame->payload.size() != expected_floats * sizeof(float)) {
        seen.push_back("wrong frame " + std::to_string(i));
        break;
      }
      seen.push_back(frame->metadata);
    }
    co_return seen;
  });
  std::atomic<int> written{0};
  asio::post(a.io(), [&] {
    for (int i = 0; i < kFrames; ++i) {
      link.first->send(MessageType::update, std::to_string(i),
                       floats(std::vector<float>(static_cast<std::size_t>(i % 7), 1.5f)),
                       [&written] { ++written; });
    }
  });
  const auto seen = await(reading);
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kFrames)) << seen.back();
  for (int i = 0; i < kFrames; ++i) {
    ASSERT_EQ(seen[static_cast<std::size_t>(i)], std::to_string(i));
  }
  // Every frame's `written` ran on the sender's thread; the byte counts agree on both ends.
  auto counts = a.run([&]() -> asio::awaitable<std::pair<std::uint64_t, int>> {
    co_return std::pair{link.first->bytes_written(), written.load()};
  });
  const auto [sent_bytes, written_calls] = await(counts);
  EXPECT_EQ(written_calls, kFrames);
  auto received =
      b.run([&]() -> asio::awaitable<std::uint64_t> { co_return link.second->bytes_read(); });
  EXPECT_EQ(await(received), sent_bytes);
}

TEST(MemoryLink, APeerThatClosesIsSeenAfterItsQueuedFrames) {
  Loop a, b;
  auto link = make_memory_link(a.executor(), b.executor());
  StopLoopsFirst stop_first{a, b};
  asio::post(a.io(), [&] {
    link.first->send(MessageType::heartbeat, "last words");
    link.first.reset();  // the end goes, as a socket closes when it is destroyed
  });
  auto reading = b.run([&]() -> asio::awaitable<std::pair<std::string, result<protocol::Frame>>> {
    auto first = co_await link.second->read_frame();
    auto second = co_await link.second->read_frame();
    co_return std::pair{first ? first->metadata : first.error().message, std::move(second)};
  });
  auto [first, second] = await(reading);
  EXPECT_EQ(first, "last words");
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, errc::unavailable);
  EXPECT_FALSE(link.second->is_open());
}

TEST(MemoryLink, AParkedReaderIsWokenByAClose) {
  Loop a, b;
  auto link = make_memory_link(a.executor(), b.executor());
  StopLoopsFirst stop_first{a, b};
  auto reading = b.run([&]() -> asio::awaitable<result<protocol::Frame>> {
    co_return co_await link.second->read_frame();
  });
  // Queued behind the reader's start on its one thread: it runs once the reader is parked.
  std::promise<void> parked;
  asio::post(b.io(), [&] { parked.set_value(); });
  parked.get_future().wait();
  asio::post(a.io(), [&] { link.first->close(); });
  const auto frame = await(reading);
  ASSERT_FALSE(frame);
  EXPECT_EQ(frame.error().code, errc::unavailable);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizedAllocator = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizedAllocator = true;
#else
constexpr bool kSanitizedAllocator = false;
#endif
#else
constexpr bool kSanitizedAllocator = false;
#endif

// Bytes glibc holds in mmap'ed blocks (a block this large is always one of them).
std::size_t mapped_heap_bytes() {
  return mallinfo2().hblkhd;
}

TEST(MemoryLink, AReadGivesItsSpareBackBeforeItWaits) {
  if (kSanitizedAllocator) {
    GTEST_SKIP() << "a sanitizer's allocator does not report through mallinfo2";
  }
  Loop a, b;
  auto link = make_memory_link(a.executor(), b.executor());
  StopLoopsFirst stop_first{a, b};
  constexpr std::size_t kSpareBytes = std::size_t{64} << 20;
  std::vector<std::byte> spare(kSpareBytes);
  const std::size_t before = mapped_heap_bytes();
  ASSERT_GE(before, kSpareBytes);
  // The session's pattern: the spare passed in the same full-expression as the co_await.
  auto reading = b.run([&]() -> asio::awaitable<result<protocol::Frame>> {
    co_return co_await link.second->read_frame(std::move(spare));
  });
  std::promise<void> parked;
  asio::post(b.io(), [&] { parked.set_value(); });
  parked.get_future().wait();
  const std::size_t waiting = mapped_heap_bytes();
  EXPECT_GE(before - std::min(before, waiting), kSpareBytes)
      << "the spare is still held while the read waits";
  asio::post(a.io(), [&] { link.first->send(MessageType::heartbeat, "next"); });
  const auto frame = await(reading);
  ASSERT_TRUE(frame) << frame.error().message;
  EXPECT_EQ(frame->metadata, "next");
}

TEST(MemoryLink, ASilentPeerMissesTheIdleDeadline) {
  Loop a, b;
  ChannelOptions options;
  options.idle_timeout = 50ms;
  auto link = make_memory_link(a.executor(), b.executor(), options);
  StopLoopsFirst stop_first{a, b};
  auto reading = b.run([&]() -> asio::awaitable<result<protocol::Frame>> {
    co_return co_await link.second->read_frame();
  });
  const auto frame = await(reading);
  ASSERT_FALSE(frame);
  EXPECT_EQ(frame.error().code, errc::deadline_exceeded);
  EXPECT_FALSE(link.first->is_open()) << "the deadline closes the link for both ends";
}

TEST(MemoryLink, AFrameTheAdmissionPolicyRefusesFailsTheReadAndClosesTheLink) {
  Loop a, b;
  auto link = make_memory_link(a.executor(), b.executor());
  StopLoopsFirst stop_first{a, b};
  link.second->set_admission([](const protocol::FrameHeader& header) {
    return header.payload_length > 8 ? Admission::refuse("at most 8 payload bytes")
                                     : Admission::accept();
  });
  asio::post(a.io(), [&] {
    link.first->send(MessageType::update, "small", floats({1.0f, 2.0f}));
    link.first->send(MessageType::update, "large", floats({1.0f, 2.0f, 3.0f}));
  });
  auto reading = b.run([&]() -> asio::awaitable<std::pair<std::string, result<protocol::Frame>>> {
    auto small = co_await link.second->read_frame();
    auto large = co_await link.second->read_frame();
    co_return std::pair{small ? small->metadata : small.error().message, std::move(large)};
  });
  auto [small, large] = await(reading);
  EXPECT_EQ(small, "small");
  ASSERT_FALSE(large);
  EXPECT_EQ(large.error().code, errc::resource_exhausted);
  EXPECT_EQ(large.error().message, "frame refused: at most 8 payload bytes");
  EXPECT_FALSE(link.first->is_open());
}

TEST(MemoryLink, AFrameAboveTheLimitsIsNotSentAndClosesTheLink) {
  Loop a, b;
  ChannelOptions options;
  options.limits.max_metadata_bytes = 4;
  auto link = make_memory_link(a.executor(), b.executor(), options);
  StopLoopsFirst stop_first{a, b};
  std::atomic<bool> written{false};
  asio::post(a.io(), [&] {
    link.first->send(MessageType::heartbeat, "too long", nullptr, [&] { written = true; });
  });
  auto reading = b.run([&]() -> asio::awaitable<result<protocol::Frame>> {
    co_return co_await link.second->read_frame();
  });
  const auto frame = await(reading);
  ASSERT_FALSE(frame);
  EXPECT_EQ(frame.error().code, errc::unavailable);
  EXPECT_FALSE(written) << "`written` never runs for a frame that was not sent";
}

// The reason memory links exist: thousands of simulated sites under the open-file limit.
TEST(MemoryLink, ThousandsOfLinksOpenNoFileDescriptor) {
  const auto open_descriptors = [] {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
      ++n;
    return n;
  };
  asio::io_context a, b;
  // The first link's timers make each io_context open its reactor (epoll, timerfd, eventfd):
  // once per io_context, not per link.
  std::vector<MemoryLinkPair> links;
  links.push_back(make_memory_link(a.get_executor(), b.get_executor()));
  const auto before = open_descriptors();
  for (int i = 1; i < 5'000; ++i) {
    links.push_back(make_memory_link(a.get_executor(), b.get_executor()));
  }
  EXPECT_EQ(open_descriptors(), before);
  for (auto& link : links) {
    EXPECT_TRUE(link.first->is_open() && link.second->is_open());
  }
}

}  // namespace
}  // namespace fedcore::net
