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
          EXPECT_EQ(co_await gate.acquire(1024, kLong), PayloadGate::Wait::granted);
          order.push_back(i);
          most = std::max(most, ++holding);
          // Hold the slot across a yield so the others really have to wait.
          co_await asio::post(io, asio::use_awaitable);
          co_await asio::post(io, asio::use_awaitable);
          --holding;
          gate.release(1024);
        },
        asio::detached);
  }
  io.run_for(std::chrono::seconds(5));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(most, 2);
  EXPECT_EQ(gate.holders(), 0u);
  EXPECT_EQ(gate.held_bytes(), 0u);
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
        EXPECT_EQ(co_await gate.acquire(1024, kLong), PayloadGate::Wait::granted);
      },
      asio::detached);
  for (int i = 0; i < 3; ++i) {
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          if (co_await gate.acquire(1024, kLong) == PayloadGate::Wait::closed) {
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
      io, [&]() -> asio::awaitable<void> { holder = co_await gate.acquire(1024, kLong); },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        impatient = co_await gate.acquire(1024, std::chrono::milliseconds(20));
      },
      asio::detached);
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { patient = co_await gate.acquire(1024, kLong); },
      asio::detached);
  io.run_for(std::chrono::milliseconds(300));
  EXPECT_EQ(holder, PayloadGate::Wait::granted);
  EXPECT_EQ(impatient, PayloadGate::Wait::timed_out);
  EXPECT_FALSE(patient.has_value());
  EXPECT_EQ(gate.waiting(), 1u);  // the impatient one left
  gate.release(1024);
  io.restart();
  io.run_for(std::chrono::milliseconds(200));
  EXPECT_EQ(patient, PayloadGate::Wait::granted);
  EXPECT_EQ(gate.holders(), 1u);
}

// Beyond its minimum of holders the gate admits what fits in its memory budget: three
// 3 KB payloads in 10 KB, the fourth waits for one of them; in arrival order, so a small
// payload does not overtake a large one that waits.
TEST(PayloadGate, AdmitsAsManyAsTheBudgetHoldsInArrivalOrder) {
  asio::io_context io;
  PayloadGate gate(io.get_executor(), 1, 1024, 10'000);
  std::vector<int> granted;
  const auto want = [&](int id, std::uint64_t bytes) {
    asio::co_spawn(
        io,
        [&, id, bytes]() -> asio::awaitable<void> {
          if (co_await gate.acquire(bytes, kLong) == PayloadGate::Wait::granted)
            granted.push_back(id);
        },
        asio::detached);
  };
  want(1, 3000);
  want(2, 3000);
  want(3, 3000);
  want(4, 3000);  // 12 KB would exceed the budget
  want(5, 500);   // would fit, but arrived after 4
  io.run_for(std::chrono::milliseconds(50));
  EXPECT_EQ(granted, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(gate.held_bytes(), 9000u);
  EXPECT_EQ(gate.waiting(), 2u);
  gate.release(3000);  // room for 4, and then for 5 beside it
  io.restart();
  io.run_for(std::chrono::milliseconds(50));
  EXPECT_EQ(granted, (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_EQ(gate.holders(), 4u);
  EXPECT_EQ(gate.held_bytes(), 9500u);
}

// A payload larger than the whole budget still moves, alone or beside the minimum.
TEST(PayloadGate, APayloadLargerThanTheBudgetIsAdmittedWithinTheMinimum) {
  asio::io_context io;
  PayloadGate gate(io.get_executor(), 2, 1024, 10'000);
  int granted = 0;
  for (int i = 0; i < 3; ++i) {
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          if (co_await gate.acquire(50'000, kLong) == PayloadGate::Wait::granted)
            ++granted;
        },
        asio::detached);
  }
  io.run_for(std::chrono::milliseconds(50));
  EXPECT_EQ(granted, 2);  // the minimum of 2, far beyond the budget
  EXPECT_EQ(gate.waiting(), 1u);
  gate.release(50'000);
  io.restart();
  io.run_for(std::chrono::milliseconds(50));
  EXPECT_EQ(granted, 3);
}

// Kept buffers stay within the budget too (beyond one per minimum holder).
TEST(PayloadGate, KeepsBuffersWithinTheBudget) {
  asio::io_context io;
  PayloadGate gate(io.get_executor(), 1, 1024, 10'000);
  for (int i = 0; i < 5; ++i)
    gate.recycle(std::vector<std::byte>(4000));
  // One for the minimum holder (4,000), then one more fits in 10,000 (8,000); a third not.
  EXPECT_EQ(gate.kept_buffers(), 2u);
  gate.drop_buffers();
  EXPECT_EQ(gate.kept_buffers(), 0u);
  for (int i = 0; i < 5; ++i)
    gate.recycle(std::vector<std::byte>(3000));
  EXPECT_EQ(gate.kept_buffers(), 3u);
}

}  // namespace
}  // namespace fedcore::net
