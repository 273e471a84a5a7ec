// The process-level helpers every binary calls: the allocator setting that keeps model-sized
// buffers warm, and the CPU time the run controller records per round.
#include <cmath>
#include <malloc.h>
#include <vector>

#include <gtest/gtest.h>

#include "shared/util/allocator_tuning.hpp"
#include "shared/util/cpu_time.hpp"

namespace fedcore {
namespace {

TEST(AllocatorTuning, GlibcTakesBothSettingsAndAFreedModelBufferIsReused) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's allocator replaces glibc's (and quarantines freed memory)";
#endif
  ASSERT_TRUE(keep_large_buffers_warm());
  // A 4 MB buffer (a 1M-parameter update) now comes from the heap; freed, its memory is
  // handed out again rather than unmapped and faulted in anew.
  const void* first = nullptr;
  {
    std::vector<float> update(1'000'000, 1.0f);
    first = update.data();
  }
  std::vector<float> next(1'000'000, 2.0f);
  EXPECT_EQ(static_cast<const void*>(next.data()), first);
}

TEST(CpuTime, ProcessCpuTimeGrowsWithWork) {
  const CpuTimes before = process_cpu_times();
  volatile double sink = 0;
  for (int i = 0; i < 20'000'000; ++i) {
    sink = sink + std::sqrt(double(i));
  }
  const CpuTimes after = process_cpu_times();
  EXPECT_GT(after.user_s + after.system_s, before.user_s + before.system_s);
  EXPECT_GE(after.user_s, before.user_s);
  EXPECT_GE(after.system_s, before.system_s);
}

}  // namespace
}  // namespace fedcore
