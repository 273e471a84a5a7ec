#include "shared/util/log_throttle.hpp"

#include <gtest/gtest.h>

namespace fedcore {
namespace {

using std::chrono::milliseconds;

TEST(LogThrottle, LogsTheFirstLinePerKeyAndCountsTheRepeatsUntilTheIntervalPasses) {
  LogThrottle throttle(milliseconds(1000));
  const Clock::steady_time t0{std::chrono::hours(1)};
  EXPECT_EQ(throttle.admit("accept: too many open files", t0), 0u);
  // A tight loop of the same failure: counted, not logged.
  for (int i = 1; i <= 5000; ++i) {
    EXPECT_FALSE(throttle.admit("accept: too many open files", t0 + milliseconds(i % 999)));
  }
  // Another key is not held back by the first.
  EXPECT_EQ(throttle.admit("refused: 127.0.0.2", t0 + milliseconds(5)), 0u);
  // After the interval the next line gets through and reports the 5,000 it stood for.
  EXPECT_EQ(throttle.admit("accept: too many open files", t0 + milliseconds(1000)), 5000u);
  EXPECT_FALSE(throttle.admit("accept: too many open files", t0 + milliseconds(1001)));
  EXPECT_EQ(throttle.admit("accept: too many open files", t0 + milliseconds(2500)), 1u);
}

TEST(LogThrottle, ManyDistinctKeysDoNotGrowWithoutBound) {
  LogThrottle throttle(milliseconds(1000), 8);
  const Clock::steady_time t0{std::chrono::hours(1)};
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(throttle.admit("refused: 10.0.0." + std::to_string(i), t0), 0u);
  }
}

TEST(LogThrottle, TheSuffixSaysHowManyLinesWereSuppressed) {
  EXPECT_EQ(suppressed_suffix(0), "");
  EXPECT_EQ(suppressed_suffix(41), " (and 41 more like it)");
}

}  // namespace
}  // namespace fedcore
