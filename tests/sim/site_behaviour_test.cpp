#include "sim/site_behaviour.hpp"

#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

namespace fedcore::sim {
namespace {
namespace asio = boost::asio;

TEST(SiteBehaviour, FaultsAreSeededPerClientAndRound) {
  SimOptions o;
  o.drop_prob = 0.3;
  o.slow_prob = 0.3;
  SiteBehaviour a(o), b(o);
  std::size_t drops = 0, slow = 0;
  for (std::size_t c = 0; c < 50; ++c) {
    for (std::int64_t r = 1; r <= 20; ++r) {
      ASSERT_EQ(a.fault(c, r), b.fault(c, r));
      drops += a.fault(c, r) == Fault::drop;
      slow += a.fault(c, r) == Fault::slow;
    }
  }
  // 1000 draws: about 300 drops and 0.7 * 0.3 * 1000 = 210 slow ones.
  EXPECT_NEAR(double(drops), 300.0, 60.0);
  EXPECT_NEAR(double(slow), 210.0, 60.0);
  o.seed = 2;
  SiteBehaviour other(o);
  std::size_t differ = 0;
  for (std::size_t c = 0; c < 50; ++c) {
    differ += other.fault(c, 1) != a.fault(c, 1);
  }
  EXPECT_GT(differ, 0u);
}

// A round the server retries is a new attempt: a site that dropped it draws again (a
// per-round draw made every retry of that round fail the same way, and a run whose only
// online site was a dropper paused after its retries).
TEST(SiteBehaviour, ARetriedRoundDrawsAgain) {
  SimOptions o;
  o.drop_prob = 0.4;
  SiteBehaviour a(o), b(o);
  std::size_t dropped_first = 0, recovered = 0;
  for (std::size_t c = 0; c < 50; ++c) {
    if (a.fault(c, 3, 0) != Fault::drop) {
      continue;
    }
    ++dropped_first;
    EXPECT_EQ(a.fault(c, 3, 0), a.fault(c, 3));  // attempt 0 is the per-round draw
    for (std::uint32_t attempt = 1; attempt <= 3; ++attempt) {
      ASSERT_EQ(a.fault(c, 3, attempt), b.fault(c, 3, attempt));  // still seeded
    }
    recovered += a.fault(c, 3, 1) != Fault::drop;
  }
  ASSERT_GT(dropped_first, 5u);
  // About 60% of the first attempt's droppers answer the retry.
  EXPECT_GT(recovered, dropped_first / 4);
  EXPECT_LT(recovered, dropped_first);
}

TEST(SiteBehaviour, NoFaultsWithoutProbabilities) {
  SiteBehaviour none(SimOptions{});
  for (std::size_t c = 0; c < 10; ++c) {
    EXPECT_EQ(none.fault(c, 1), Fault::none);
  }
}

// Updates leave as soon as they are ready, in whatever order the sites finish: the server's
// sum does not depend on it (server/federation/fixed_point_mean.hpp).
TEST(SiteBehaviour, UpdatesLeaveAsSoonAsTheyAreReady) {
  SiteBehaviour behaviour(SimOptions{});
  asio::io_context io;
  int done = 0;
  for (std::size_t c : {1u, 0u}) {
    asio::co_spawn(
        io,
        [&, c]() -> asio::awaitable<void> {
          co_await behaviour.seam(c)(client::TrainedRound{1, 1, 0.0});
          ++done;
        },
        asio::detached);
  }
  io.run();
  EXPECT_EQ(done, 2);
}

}  // namespace
}  // namespace fedcore::sim
