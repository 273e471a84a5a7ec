#include "shared/net/watchdog.hpp"

#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <gtest/gtest.h>

namespace fedcore::net {
namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;

TEST(Watchdog, RunsItsActionOnceWhenTheDeadlinePassesWhileArmed) {
  asio::io_context io;
  int expiries = 0;
  Watchdog watchdog(io.get_executor(), milliseconds(0), [&] { ++expiries; });
  EXPECT_FALSE(watchdog.fired());
  io.run_for(std::chrono::seconds(5));
  EXPECT_EQ(expiries, 1);
  EXPECT_TRUE(watchdog.fired());
}

TEST(Watchdog, DoesNothingOnceDisarmed) {
  asio::io_context io;
  int expiries = 0;
  Watchdog watchdog(io.get_executor(), milliseconds(0), [&] { ++expiries; });
  watchdog.disarm();
  io.run_for(std::chrono::seconds(5));
  EXPECT_EQ(expiries, 0);
  EXPECT_FALSE(watchdog.fired());
}

// The case plain steady_timer::cancel() gets wrong: the deadline's handler is already
// queued (both timers below are past due, so one pass of the io_context queues both in
// deadline order) when the step it guards ends and its frame is destroyed. The expiry
// that then runs must not reach the destroyed frame.
TEST(Watchdog, AnExpiryAlreadyQueuedWhenTheWatchdogIsDestroyedDoesNothing) {
  asio::io_context io;
  int expiries = 0;
  // The step's end is due an hour before the deadline, however long the lines between
  // take: the io_context's first pass queues both handlers, in that order.
  asio::steady_timer step_ends(io);
  step_ends.expires_at(std::chrono::steady_clock::now() - std::chrono::hours(2));
  auto watchdog =
      std::make_unique<Watchdog>(io.get_executor(), -std::chrono::hours(1), [&] { ++expiries; });
  bool step_ended = false;
  step_ends.async_wait([&](const boost::system::error_code& ec) {
    ASSERT_FALSE(ec);
    step_ended = true;
    watchdog.reset();
  });
  io.run_for(std::chrono::seconds(5));
  EXPECT_TRUE(step_ended);
  EXPECT_EQ(watchdog, nullptr);
  EXPECT_EQ(expiries, 0);
}

TEST(Watchdog, AnExpiryAlreadyQueuedWhenTheWatchdogIsDisarmedDoesNothing) {
  asio::io_context io;
  int expiries = 0;
  asio::steady_timer step_ends(io);
  step_ends.expires_at(std::chrono::steady_clock::now() - std::chrono::hours(2));
  Watchdog watchdog(io.get_executor(), -std::chrono::hours(1), [&] { ++expiries; });
  step_ends.async_wait([&](const boost::system::error_code&) { watchdog.disarm(); });
  io.run_for(std::chrono::seconds(5));
  EXPECT_EQ(expiries, 0);
  EXPECT_FALSE(watchdog.fired());
}

}  // namespace
}  // namespace fedcore::net
