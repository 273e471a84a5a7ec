// The reconnect backoff on its own (client/backoff.hpp): the bounds of every wait, starting
// over, the healthy-session rule, and the per-site seeds that keep a restarted server from
// being hit by every site in the same few milliseconds (issue 19). The daemon's use of it
// (reset after a healthy session, however it ended) is tested in session_test.cpp.
#include "client/backoff.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace fedcore::client {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

TEST(Backoff, EveryWaitLiesInMinCapAndWithinThreeTimesThePreviousOne) {
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    Backoff backoff(500ms, 30s, seed);
    milliseconds previous = 500ms;
    milliseconds longest = 0ms;
    for (int i = 0; i < 200; ++i) {
      const auto wait = backoff.next();
      ASSERT_GE(wait, 500ms) << "seed " << seed << " draw " << i;
      ASSERT_LE(wait, std::min(30000ms, previous * 3)) << "seed " << seed << " draw " << i;
      previous = wait;
      longest = std::max(longest, wait);
    }
    // A long outage reaches the cap's neighbourhood (the old schedule overshot it by 1.5x).
    EXPECT_GE(longest, 27s) << "seed " << seed;
  }
}

TEST(Backoff, TheFirstWaitsAfterAResetStartFromTheMinimum) {
  Backoff backoff(100ms, 10s, 3);
  for (int i = 0; i < 30; ++i) {
    (void)backoff.next();  // into the long waits of an outage
  }
  backoff.reset();
  const auto first = backoff.next();
  EXPECT_GE(first, 100ms);
  EXPECT_LE(first, 300ms);
  const auto second = backoff.next();
  EXPECT_GE(second, 100ms);
  EXPECT_LE(second, first * 3);
}

TEST(Backoff, DegenerateBoundsAreRaisedToOneMillisecondAndTheMinimum) {
  Backoff zero(0ms, 0ms, 1);
  EXPECT_EQ(zero.min(), 1ms);
  EXPECT_EQ(zero.cap(), 1ms);
  EXPECT_EQ(zero.next(), 1ms);
  Backoff inverted(800ms, 200ms, 1);
  EXPECT_EQ(inverted.cap(), 800ms);
  EXPECT_EQ(inverted.next(), 800ms);
}

TEST(Backoff, TheSameSeedGivesTheSameWaitsAndAnotherSeedOthers) {
  Backoff a(1000ms, 60000ms, 9), b(1000ms, 60000ms, 9), c(1000ms, 60000ms, 10);
  std::vector<milliseconds> wa, wb, wc;
  for (int i = 0; i < 6; ++i) {
    wa.push_back(a.next());
    wb.push_back(b.next());
    wc.push_back(c.next());
  }
  EXPECT_EQ(wa, wb);
  EXPECT_NE(wa, wc);
}

TEST(Backoff, AHealthySessionIsWelcomedAndLastsTheMinimum) {
  EXPECT_TRUE(is_healthy_session(true, 60s, 60s));
  EXPECT_TRUE(is_healthy_session(true, 5h, 60s));
  EXPECT_FALSE(is_healthy_session(true, 59999ms, 60s));  // a crash-looping server
  EXPECT_FALSE(is_healthy_session(false, 5h, 60s));      // never WELCOMEd
  EXPECT_EQ(kHealthySession, 60s);
}

TEST(JitterSeed, DistinctSitesGetDistinctSeedsFromTheSameEntropy) {
  // Even if the OS source gave every site the same bits, the ids keep them apart.
  std::set<std::uint64_t> seeds;
  for (int i = 0; i < 1000; ++i) {
    seeds.insert(jitter_seed("hospital-" + std::to_string(i), 42));
  }
  EXPECT_EQ(seeds.size(), 1000u);
  EXPECT_EQ(jitter_seed("hospital-1", 42), jitter_seed("hospital-1", 42));
  EXPECT_NE(jitter_seed("hospital-1", 42), jitter_seed("hospital-1", 43));
}

TEST(JitterSeed, OneSiteGetsANewSeedAtEveryProcessStart) {
  // Two draws of 64 OS-random bits; equal with probability 2^-64.
  EXPECT_NE(jitter_seed("hospital-1"), jitter_seed("hospital-1"));
}

// The scenario: the server restarts and every site loses its connection in the
// same instant. With one seed for all (the old default) they all came back within 4 ms of
// each other; with their own seeds the first retries spread evenly over [min, 3 min].
TEST(JitterSeed, SitesLosingTheirServerTogetherComeBackSpreadOut) {
  constexpr int kSites = 1000;
  std::vector<milliseconds> first;
  for (int i = 0; i < kSites; ++i) {
    Backoff backoff(500ms, 30s, jitter_seed("hospital-" + std::to_string(i), 7));
    first.push_back(backoff.next());
  }
  std::sort(first.begin(), first.end());
  EXPECT_GE(first.front(), 500ms);
  EXPECT_LE(first.back(), 1500ms);
  EXPECT_LT(first.front(), 520ms);
  EXPECT_GT(first.back(), 1480ms);
  // No 4 ms window holds more than 2% of the sites (uniform: 4 on average).
  std::size_t crowd = 0;
  for (std::size_t lo = 0, hi = 0; lo < first.size(); ++lo) {
    while (hi < first.size() && first[hi] < first[lo] + 4ms) {
      ++hi;
    }
    crowd = std::max(crowd, hi - lo);
  }
  EXPECT_LE(crowd, 20u);
  double mean = 0;
  for (auto w : first) {
    mean += static_cast<double>(w.count()) / kSites;
  }
  EXPECT_NEAR(mean, 1000.0, 30.0);
}

}  // namespace
}  // namespace fedcore::client
