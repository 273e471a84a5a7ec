#include "shared/util/threads.hpp"

#include <sched.h>

#include <gtest/gtest.h>

namespace fedcore {
namespace {

TEST(UsableCpus, FollowsTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  const int all = usable_cpus();
  EXPECT_GE(all, 1);
  EXPECT_EQ(all, CPU_COUNT(&saved));

  // Pinned to the first CPU of its mask, as `taskset -c N` would: one CPU.
  int first = 0;
  while (first < CPU_SETSIZE && !CPU_ISSET(first, &saved)) {
    ++first;
  }
  ASSERT_LT(first, CPU_SETSIZE);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(usable_cpus(), 1);
  EXPECT_GE(online_cpus(), all);  // the machine's, not the mask's
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(usable_cpus(), all);
}

}  // namespace
}  // namespace fedcore
