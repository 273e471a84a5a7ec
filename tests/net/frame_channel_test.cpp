// FrameChannel over real loopback TCP sockets. Every test runs its io_context with a
// bound (run_for), so a broken deadline fails the test instead of hanging it.
#include "shared/net/frame_channel.hpp"

#include <cstring>
#include <functional>
#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include "shared/net/payload_gate.hpp"

namespace fedcore::net {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using protocol::MessageType;
using Clock = std::chrono::steady_clock;

using Side = std::function<asio::awaitable<void>(tcp::socket)>;

// Connects a client socket to a server socket on 127.0.0.1 and runs both sides as
// coroutines; fails the test if they have not both finished within `bound`.
void run_pair(Side server, Side client, std::chrono::seconds bound = std::chrono::seconds(10)) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const auto endpoint = acceptor.local_endpoint();
  int finished = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto socket = co_await acceptor.async_accept(asio::use_awaitable);
        co_await server(std::move(socket));
        ++finished;
      },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        tcp::socket socket(io);
        co_await socket.async_connect(endpoint, asio::use_awaitable);
        co_await client(std::move(socket));
        ++finished;
      },
      asio::detached);
  io.run_for(bound);
  EXPECT_EQ(finished, 2) << "a side did not finish within the bound";
}

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_after(d);
  co_await timer.async_wait(asio::use_awaitable);
}

ChannelOptions fast(std::chrono::milliseconds idle, std::chrono::milliseconds transfer) {
  ChannelOptions o;
  o.idle_timeout = idle;
  o.transfer_timeout = transfer;
  return o;
}

TEST(FrameChannel, RoundTripsFramesAndALargePayloadWithoutLoss) {
  std::vector<float> params(1 << 20);
  for (std::size_t i = 0; i < params.size(); ++i) {
    params[i] = static_cast<float>(i) * 0.5f;
  }
  std::vector<protocol::Frame> received;
  std::uint64_t sent_bytes = 0, received_bytes = 0;
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(std::move(s), {});
        for (int i = 0; i < 3; ++i) {
          auto frame = co_await channel.read_frame();
          EXPECT_TRUE(frame) << frame.error().to_string();
          if (frame) {
            received.push_back(std::move(*frame));
          }
        }
        received_bytes = channel.bytes_read();
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(std::move(s), {});
        EXPECT_TRUE(co_await channel.write_frame(MessageType::hello, R"({"samples":120})"));
        EXPECT_TRUE(co_await channel.write_frame(MessageType::update, R"({"round":1})",
                                                 std::as_bytes(std::span<const float>(params))));
        EXPECT_TRUE(co_await channel.write_frame(MessageType::heartbeat, "{}"));
        sent_bytes = channel.bytes_written();
      });
  ASSERT_EQ(received.size(), 3u);
  EXPECT_EQ(received[0].type, MessageType::hello);
  EXPECT_EQ(received[0].metadata, R"({"samples":120})");
  EXPECT_EQ(received[1].type, MessageType::update);
  auto floats = protocol::payload_floats(received[1].payload);
  ASSERT_TRUE(floats);
  ASSERT_EQ(floats->size(), params.size());
  EXPECT_EQ(std::memcmp(floats->data(), params.data(), params.size() * 4), 0);
  EXPECT_EQ(received[2].type, MessageType::heartbeat);
  EXPECT_EQ(sent_bytes, received_bytes);
  EXPECT_EQ(sent_bytes, 3 * protocol::kFrameHeaderSize + 15 + 11 + 2 + params.size() * 4);
}

// A spare buffer that is large enough receives the payload (no fresh pages); one that is
// too small is left alone. Either way the payload is exactly what was sent.
TEST(FrameChannel, ReceivesIntoTheCallersSpareBufferWhenItIsLargeEnough) {
  std::vector<std::byte> first(4096, std::byte{1}), second(1000, std::byte{2}),
      third(8192, std::byte{3});
  std::vector<protocol::Frame> received;
  const std::byte* spare_data = nullptr;
  bool first_in_spare = false, second_in_spare = false, third_in_spare = true;
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(std::move(s), {});
        std::vector<std::byte> spare(6000, std::byte{9});
        for (bool* reused : {&first_in_spare, &second_in_spare, &third_in_spare}) {
          spare_data = spare.data();
          auto frame = co_await channel.read_frame(std::move(spare));
          EXPECT_TRUE(frame) << frame.error().to_string();
          if (!frame) {
            co_return;
          }
          *reused = frame->payload.data() == spare_data;
          received.push_back(*frame);
          spare = std::move(frame->payload);
        }
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(std::move(s), {});
        for (const auto* payload : {&first, &second, &third}) {
          EXPECT_TRUE(co_await channel.write_frame(MessageType::update, "{}", *payload));
        }
      });
  ASSERT_EQ(received.size(), 3u);
  EXPECT_TRUE(first_in_spare);
  EXPECT_TRUE(second_in_spare);  // the first frame's payload, 6000 bytes of capacity
  EXPECT_FALSE(third_in_spare);  // 8192 bytes do not fit
  EXPECT_EQ(received[0].payload, first);
  EXPECT_EQ(received[1].payload, second);
  EXPECT_EQ(received[2].payload, third);
}

TEST(FrameChannel, SilentPeerHitsTheIdleDeadline) {
  std::optional<error> failure;
  Clock::duration waited{};
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(
            std::move(s), fast(std::chrono::milliseconds(200), std::chrono::seconds(5)));
        const auto start = Clock::now();
        auto frame = co_await channel.read_frame();
        waited = Clock::now() - start;
        if (!frame) {
          failure = frame.error();
        }
        EXPECT_FALSE(channel.is_open());
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        co_await sleep_for(std::chrono::milliseconds(600));  // connected but silent
        s.close();
      });
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->code, errc::deadline_exceeded);
  EXPECT_NE(failure->message.find("idle"), std::string::npos);
  EXPECT_GE(waited, std::chrono::milliseconds(190));
  EXPECT_LT(waited, std::chrono::milliseconds(550));
}

// What a read over `options` returns when the peer sends a header announcing 100 payload
// bytes, then only 10 of them, and falls silent for 600 ms.
std::optional<error> read_from_a_peer_stalled_inside_a_frame(const ChannelOptions& options) {
  std::optional<error> failure;
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(std::move(s), options);
        auto frame = co_await channel.read_frame();
        if (!frame) {
          failure = frame.error();
        }
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        const auto head = protocol::encode_header({MessageType::update, 2, 0, 100});
        co_await asio::async_write(s, asio::buffer(head), asio::use_awaitable);
        const char partial[12] = "{}012345678";
        co_await asio::async_write(s, asio::buffer(partial, 12), asio::use_awaitable);
        co_await sleep_for(std::chrono::milliseconds(600));
      });
  return failure;
}

TEST(FrameChannel, PeerStalledInsideAFrameHitsTheTransferDeadline) {
  const auto failure = read_from_a_peer_stalled_inside_a_frame(
      fast(std::chrono::seconds(5), std::chrono::milliseconds(200)));
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->code, errc::deadline_exceeded);
  EXPECT_NE(failure->message.find("transfer"), std::string::npos);
}

TEST(FrameChannel, OwnWritesDoNotExtendTheReadDeadline) {
  std::optional<error> failure;
  Clock::duration waited{};
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(
            std::move(s), fast(std::chrono::milliseconds(300), std::chrono::seconds(5)));
        bool reading_done = false;
        // A heartbeat writer keeps sending while the read waits on a silent peer.
        asio::co_spawn(
            co_await asio::this_coro::executor,
            [&]() -> asio::awaitable<void> {
              while (!reading_done && channel.is_open()) {
                co_await channel.write_frame(MessageType::heartbeat, "{}");
                co_await sleep_for(std::chrono::milliseconds(50));
              }
            },
            asio::detached);
        const auto start = Clock::now();
        auto frame = co_await channel.read_frame();
        waited = Clock::now() - start;
        reading_done = true;
        if (!frame) {
          failure = frame.error();
        }
        co_await sleep_for(std::chrono::milliseconds(100));  // let the writer notice
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        co_await sleep_for(std::chrono::milliseconds(900));  // reads nothing, says nothing
        s.close();
      });
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->code, errc::deadline_exceeded);
  EXPECT_LT(waited, std::chrono::milliseconds(800));
}

TEST(FrameChannel, OversizedHeaderIsRefusedBeforeReadingTheBody) {
  std::optional<error> failure;
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        ChannelOptions o = fast(std::chrono::seconds(5), std::chrono::seconds(5));
        o.limits.max_payload_bytes = 1 << 20;
        FrameChannel<TcpStream> channel(std::move(s), o);
        auto frame = co_await channel.read_frame();
        if (!frame) {
          failure = frame.error();
        }
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        const auto head =
            protocol::encode_header({MessageType::update, 2, 0, std::uint64_t{1} << 40});
        co_await asio::async_write(s, asio::buffer(head), asio::use_awaitable);
        co_await sleep_for(std::chrono::milliseconds(100));
      });
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->code, errc::resource_exhausted);
}

// The session decides from the header alone: a refused frame costs no allocation and no
// wait for its body, and the peer finds the connection closed.
TEST(FrameChannel, AnAdmissionPolicyRefusesAFrameFromItsHeaderAndClosesTheChannel) {
  std::optional<error> failure;
  bool peer_saw_close = false;
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(std::move(s),
                                        fast(std::chrono::seconds(5), std::chrono::seconds(5)));
        channel.set_admission([](const protocol::FrameHeader& h) {
          return h.payload_length > 16 ? Admission::refuse("too big for now") : Admission::accept();
        });
        auto frame = co_await channel.read_frame();
        if (!frame) {
          failure = frame.error();
        }
        EXPECT_FALSE(channel.is_open());
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        const auto head =
            protocol::encode_header({MessageType::update, 2, 0, std::uint64_t{1} << 30});
        co_await asio::async_write(s, asio::buffer(head), asio::use_awaitable);
        char byte = 0;
        auto [ec, n] =
            co_await s.async_read_some(asio::buffer(&byte, 1), asio::as_tuple(asio::use_awaitable));
        peer_saw_close = ec && n == 0;
      });
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->code, errc::resource_exhausted);
  EXPECT_NE(failure->message.find("too big for now"), std::string::npos) << failure->message;
  EXPECT_TRUE(peer_saw_close);
}

// Upload slots: a frame whose sender may not hold one is refused, and a holder that stops
// sending loses its slot after the stall timeout (long before the transfer deadline).
TEST(FrameChannel, AStalledSlotHolderLosesItsSlotAndANonParticipantCannotTakeOne) {
  std::optional<error> stalled, not_allowed;
  std::shared_ptr<PayloadGate> gate;
  Clock::duration waited{};
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        ChannelOptions o = fast(std::chrono::seconds(5), std::chrono::seconds(30));
        gate = std::make_shared<PayloadGate>(co_await asio::this_coro::executor, 1, 1024);
        o.payload_gate = gate;
        o.stall_timeout = std::chrono::milliseconds(150);
        FrameChannel<TcpStream> channel(std::move(s), o);
        const auto start = Clock::now();
        auto frame = co_await channel.read_frame();
        waited = Clock::now() - start;
        if (!frame) {
          stalled = frame.error();
        }
        EXPECT_EQ(gate->holders(), 0u);  // given back
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        const auto head = protocol::encode_header({MessageType::update, 2, 0, 1 << 20});
        co_await asio::async_write(s, asio::buffer(head), asio::use_awaitable);
        const char partial[12] = "{}012345678";
        co_await asio::async_write(s, asio::buffer(partial, 12), asio::use_awaitable);
        co_await sleep_for(std::chrono::milliseconds(800));
      });
  ASSERT_TRUE(stalled);
  EXPECT_EQ(stalled->code, errc::deadline_exceeded);
  EXPECT_NE(stalled->message.find("stalled"), std::string::npos) << stalled->message;
  EXPECT_LT(waited, std::chrono::milliseconds(700));

  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        ChannelOptions o = fast(std::chrono::seconds(5), std::chrono::seconds(5));
        o.payload_gate = std::make_shared<PayloadGate>(co_await asio::this_coro::executor, 1, 1024);
        FrameChannel<TcpStream> channel(std::move(s), o);
        channel.set_admission(
            [](const protocol::FrameHeader&) { return Admission::accept(/*slot=*/false); });
        auto frame = co_await channel.read_frame();
        if (!frame) {
          not_allowed = frame.error();
        }
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        const auto head = protocol::encode_header({MessageType::update, 2, 0, 1 << 20});
        co_await asio::async_write(s, asio::buffer(head), asio::use_awaitable);
        co_await sleep_for(std::chrono::milliseconds(100));
      });
  ASSERT_TRUE(not_allowed);
  EXPECT_EQ(not_allowed->code, errc::resource_exhausted);
}

// A deadline must not outlive the read it belongs to: after a frame without payload (a
// handshake's last message) a channel nobody reads from stays open past the transfer
// deadline. (A deadline left armed once closed in-datacenter links a minute after setup.)
TEST(FrameChannel, NoDeadlineOutlivesAReadThatReturned) {
  bool open_after = false;
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(
            std::move(s), fast(std::chrono::seconds(5), std::chrono::milliseconds(100)));
        auto frame = co_await channel.read_frame();
        EXPECT_TRUE(frame);
        co_await sleep_for(std::chrono::milliseconds(400));
        open_after = channel.is_open();
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(std::move(s), {});
        co_await channel.write_frame(MessageType::peer_welcome, R"({"ring_opened":false})");
        co_await sleep_for(std::chrono::milliseconds(600));
      });
  EXPECT_TRUE(open_after);
}

ChannelOptions lazy(std::chrono::milliseconds idle, std::chrono::milliseconds transfer) {
  auto o = fast(idle, transfer);
  o.lazy_deadline_timers = true;
  return o;
}

// Lazy timers (the collectives' transport): a read whose deadline is later than the one the
// timer waits for leaves the timer alone, and the timer catches up when it fires. The
// second read here starts 150 ms after the first, so the timer, scheduled for the first
// read's deadline, fires 150 ms into it: it must move on to the second read's own deadline
// rather than close the channel.
TEST(LazyDeadlineTimers, AReadStartedLaterGetsItsWholeDeadline) {
  std::optional<error> failure;
  Clock::duration waited{};
  bool first_read = false;
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(
            std::move(s), lazy(std::chrono::milliseconds(300), std::chrono::seconds(5)));
        first_read = static_cast<bool>(co_await channel.read_frame());
        const auto start = Clock::now();
        auto frame = co_await channel.read_frame();
        waited = Clock::now() - start;
        if (!frame) {
          failure = frame.error();
        }
        EXPECT_FALSE(channel.is_open());
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(std::move(s), {});
        co_await sleep_for(std::chrono::milliseconds(150));
        co_await channel.write_frame(MessageType::heartbeat, "{}");
        co_await sleep_for(std::chrono::milliseconds(1200));  // then silent
      });
  EXPECT_TRUE(first_read);
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->code, errc::deadline_exceeded);
  EXPECT_NE(failure->message.find("idle"), std::string::npos);
  EXPECT_GE(waited, std::chrono::milliseconds(290));
  EXPECT_LT(waited, std::chrono::milliseconds(1100));
}

// A lazy timer left waiting after a read returned does not close the channel when it
// fires: no operation is armed, so it lapses. And none keeps the io_context busy once the
// channels are gone (run_pair returns long before its bound).
TEST(LazyDeadlineTimers, NoDeadlineOutlivesAReadThatReturnedAndNoTimerOutlivesTheChannel) {
  bool open_after = false;
  const auto start = Clock::now();
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(
            std::move(s), lazy(std::chrono::seconds(3600), std::chrono::milliseconds(100)));
        auto frame = co_await channel.read_frame();
        EXPECT_TRUE(frame);
        co_await sleep_for(std::chrono::milliseconds(400));
        open_after = channel.is_open();
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(
            std::move(s), lazy(std::chrono::seconds(3600), std::chrono::seconds(3600)));
        co_await channel.write_frame(MessageType::peer_welcome, R"({"ring_opened":false})");
        co_await sleep_for(std::chrono::milliseconds(600));
      });
  EXPECT_TRUE(open_after);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST(LazyDeadlineTimers, APeerStalledInsideAFrameStillHitsTheTransferDeadline) {
  const auto failure = read_from_a_peer_stalled_inside_a_frame(
      lazy(std::chrono::seconds(3600), std::chrono::milliseconds(200)));
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->code, errc::deadline_exceeded);
  EXPECT_NE(failure->message.find("transfer"), std::string::npos);
}

TEST(FrameChannel, GarbageBytesAreDataLoss) {
  std::optional<error> failure;
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(std::move(s),
                                        fast(std::chrono::seconds(5), std::chrono::seconds(5)));
        auto frame = co_await channel.read_frame();
        if (!frame) {
          failure = frame.error();
        }
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        co_await asio::async_write(s, asio::buffer(http, sizeof http - 1), asio::use_awaitable);
        co_await sleep_for(std::chrono::milliseconds(100));
      });
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->code, errc::data_loss);
}

TEST(FrameChannel, PeerCloseBetweenFramesIsUnavailableAndInsideAFrameIsOutOfRange) {
  std::optional<error> between, inside;
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(std::move(s),
                                        fast(std::chrono::seconds(5), std::chrono::seconds(5)));
        auto frame = co_await channel.read_frame();
        if (!frame) {
          between = frame.error();
        }
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        s.close();
        co_return;
      });
  run_pair(
      [&](tcp::socket s) -> asio::awaitable<void> {
        FrameChannel<TcpStream> channel(std::move(s),
                                        fast(std::chrono::seconds(5), std::chrono::seconds(5)));
        auto frame = co_await channel.read_frame();
        if (!frame) {
          inside = frame.error();
        }
      },
      [&](tcp::socket s) -> asio::awaitable<void> {
        const auto head = protocol::encode_header({MessageType::update, 2, 0, 64});
        co_await asio::async_write(s, asio::buffer(head), asio::use_awaitable);
        s.close();
      });
  ASSERT_TRUE(between);
  EXPECT_EQ(between->code, errc::unavailable);
  ASSERT_TRUE(inside);
  EXPECT_EQ(inside->code, errc::out_of_range);
}

}  // namespace
}  // namespace fedcore::net
