#include "shared/net/payload_gate.hpp"

#include <optional>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

namespace fedcore::net {
namespace {

namespace asio = boost::asio;
constexpr std::chrono::milliseconds kLong{std::chrono::seconds(30)};

TEST(PayloadGate, GrantsSlotsInArrivalOrderAndNeverMoreThanItHas) {
  asio::io_context io;
  PayloadGate gate(io.get_executor(), 2, 1024);
  std::vector<int> order;
  int holding = 0, most = 0;
  for (int i = 0; i < 5; ++i) {
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          EXPECT_EQ(co_await gate.acquire(kLong), PayloadGate::Wait::granted);
          order.push_back(i);
          most = std::max(most, ++holding);
          // Hold the slot across a yield so the others really have to wait.
          co_await asio::post(io, asio::use_awaitable);
          co_await asio::post(io, asio::use_awaitable);
          --holding;
          gate.release();
        },
        asio::detached);
  }
  io.run_for(std::chrono::seconds(5));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(most, 2);
  EXPECT_EQ(gate.free_slots(), 2u);
}

TEST(PayloadGate, KeepsAtMostOneBufferPerSlotAndHandsOutOneThatFits) {
  asio::io_context io;
  PayloadGate gate(io.get_executor(), 2, 1024);
  EXPECT_TRUE(gate.take_buffer(4096).empty()) << "nothing kept yet";
  std::vector<std::byte> small(100), big(8192), bigger(16384), extra(4096);
  const auto* big_data = big.data();
  gate.recycle(std::move(small));  // below the threshold: freed
  EXPECT_EQ(gate.kept_buffers(), 0u);
  gate.recycle(std::move(big));
  gate.recycle(std::move(bigger));
  gate.recycle(std::move(extra));  // two slots, two buffers kept at most
  EXPECT_EQ(gate.kept_buffers(), 2u);
  EXPECT_TRUE(gate.take_buffer(20000).empty()) << "none is large enough";
  auto taken = gate.take_buffer(5000);
  EXPECT_EQ(taken.data(), big_data) << "the first kept buffer that fits, warm and sized";
  EXPECT_EQ(taken.size(), 8192u);
  EXPECT_EQ(gate.kept_buffers(), 1u);
  gate.close();
  EXPECT_EQ(gate.kept_buffers(), 0u);
  gate.recycle(std::move(taken));
  EXPECT_EQ(gate.kept_buffers(), 0u) << "a closed gate keeps nothing";
}

TEST(PayloadGate, CloseWakesWaitersWithFalse) {
  asio::io_context io;
  PayloadGate gate(io.get_executor(), 1, 1024);
  int refused = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        EXPECT_EQ(co_await gate.acquire(kLong), PayloadGate::Wait::granted);
      },
      asio::detached);
  for (int i = 0; i < 3; ++i) {
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          if (co_await gate.acquire(kLong) == PayloadGate::Wait::closed) {
            ++refused;
          }
        },
        asio::detached);
  }
  io.run_for(std::chrono::milliseconds(50));
  EXPECT_EQ(gate.waiting(), 3u);
  gate.close();
  io.restart();
  io.run_for(std::chrono::seconds(2));
  EXPECT_EQ(refused, 3);
}

// Stalled slot holders must not park a waiter for ever: the wait has a deadline, and a
// waiter that gave up leaves the queue (a later release goes to the next one).
TEST(PayloadGate, AWaiterGivesUpAfterItsTimeoutAndLeavesTheQueue) {
  asio::io_context io;
  PayloadGate gate(io.get_executor(), 1, 1024);
  std::optional<PayloadGate::Wait> holder, impatient, patient;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { holder = co_await gate.acquire(kLong); },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        impatient = co_await gate.acquire(std::chrono::milliseconds(20));
      },
      asio::detached);
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { patient = co_await gate.acquire(kLong); },
      asio::detached);
  io.run_for(std::chrono::milliseconds(300));
  EXPECT_EQ(holder, PayloadGate::Wait::granted);
  EXPECT_EQ(impatient, PayloadGate::Wait::timed_out);
  EXPECT_FALSE(patient.has_value());
  EXPECT_EQ(gate.waiting(), 1u);  // the impatient one left
  gate.release();
  io.restart();
  io.run_for(std::chrono::milliseconds(200));
  EXPECT_EQ(patient, PayloadGate::Wait::granted);
  EXPECT_EQ(gate.free_slots(), 0u);
}

}  // namespace
}  // namespace fedcore::net
