#include "shared/net/payload_gate.hpp"

#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

namespace fedcore::net {
namespace {

namespace asio = boost::asio;

TEST(PayloadGate, GrantsSlotsInArrivalOrderAndNeverMoreThanItHas) {
  asio::io_context io;
  PayloadGate gate(io.get_executor(), 2, 1024);
  std::vector<int> order;
  int holding = 0, most = 0;
  for (int i = 0; i < 5; ++i) {
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          EXPECT_TRUE(co_await gate.acquire());
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

TEST(PayloadGate, CloseWakesWaitersWithFalse) {
  asio::io_context io;
  PayloadGate gate(io.get_executor(), 1, 1024);
  int refused = 0;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { EXPECT_TRUE(co_await gate.acquire()); }, asio::detached);
  for (int i = 0; i < 3; ++i) {
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          if (!co_await gate.acquire()) {
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

}  // namespace
}  // namespace fedcore::net
