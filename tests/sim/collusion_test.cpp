// fedcore-sim's colluding attackers (sim/collusion.hpp): the paper's z, the crafted update
// against a hand-computed one, and the meeting of the attackers without blocking a thread.
#include "sim/collusion.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <gtest/gtest.h>

namespace fedcore::sim {
namespace {

namespace asio = boost::asio;

// Baruch et al. 2019, section 4: s = floor(n/2 + 1) - m, z = Phi^-1((n - s) / n).
// n = 30, m = 6: s = 10, Phi^-1(20/30) = 0.43073; n = 50, m = 12: s = 14,
// Phi^-1(36/50) = 0.58284; n = 30, m = 3: s = 13, Phi^-1(17/30) = 0.16789.
TEST(Collusion, ZFollowsThePapersRule) {
  EXPECT_NEAR(little_is_enough_z(30, 6), 0.43073, 1e-4);
  EXPECT_NEAR(little_is_enough_z(50, 12), 0.58284, 1e-4);
  EXPECT_NEAR(little_is_enough_z(30, 3), 0.16789, 1e-4);
  EXPECT_EQ(little_is_enough_z(30, 0), 0.0);   // s = 16, (30 - 16) / 30 < 0.5: no shift
  EXPECT_EQ(little_is_enough_z(10, 10), 3.0);  // the clamp
}

// Updates (1, 2), (3, 2), (5, 2): mean (3, 2), population deviation (sqrt(8/3), 0);
// with z = 1: (3 - 1.632993, 2).
TEST(Collusion, CraftedUpdateIsMeanMinusZSigma) {
  const auto crafted = little_is_enough_update({{1, 2}, {3, 2}, {5, 2}}, 1.0);
  ASSERT_EQ(crafted.size(), 2u);
  EXPECT_NEAR(crafted[0], 1.367007f, 1e-5);
  EXPECT_NEAR(crafted[1], 2.0f, 1e-6);
}

TEST(Collusion, CraftedOnlyOnceEveryAttackerDeposited) {
  Collusion c(3, 1.0);
  c.deposit(4, 0, std::vector<float>{1, 2});
  c.deposit(4, 7, std::vector<float>{3, 2});
  EXPECT_FALSE(c.crafted(4));
  EXPECT_FALSE(c.crafted(5));
  c.deposit(4, 9, std::vector<float>{5, 2});
  const auto crafted = c.crafted(4);
  ASSERT_TRUE(crafted);
  EXPECT_NEAR((*crafted)[0], 1.367007f, 1e-5);
  // A deposit after the crafting is the server redoing the round: it starts over.
  c.deposit(4, 0, std::vector<float>{0, 0});
  EXPECT_FALSE(c.crafted(4));
}

// One attacker waits on the io thread while the last deposit arrives later (from a timer
// on the same thread: the wait must not block it); a second waits for a round whose other
// attackers never come and, after its limit, sends what the deposits make.
TEST(Collusion, RewriteWaitsWithoutBlockingAndGivesUpAfterItsLimit) {
  asio::io_context io;
  Collusion c(2, 1.0);
  c.deposit(1, 0, std::vector<float>{1, 1});
  c.deposit(2, 0, std::vector<float>{4, 4});
  std::vector<float> waited{1, 1}, alone{4, 4};
  bool waited_done = false, alone_done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await c.rewrite(1, waited, std::chrono::seconds(20), std::chrono::milliseconds(1));
        waited_done = true;
      },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await c.rewrite(2, alone, std::chrono::milliseconds(30), std::chrono::milliseconds(1));
        alone_done = true;
      },
      asio::detached);
  asio::steady_timer later(io, std::chrono::milliseconds(10));
  later.async_wait([&](const boost::system::error_code&) {
    c.deposit(1, 1, std::vector<float>{3, 5});  // mean (2, 3), deviation (1, 2)
  });
  io.run_for(std::chrono::seconds(20));
  ASSERT_TRUE(waited_done);
  ASSERT_TRUE(alone_done);
  EXPECT_EQ(waited, (std::vector<float>{1, 1}));  // (2 - 1, 3 - 2)
  EXPECT_EQ(alone, (std::vector<float>{4, 4}));   // one deposit: its own update
}

}  // namespace
}  // namespace fedcore::sim
