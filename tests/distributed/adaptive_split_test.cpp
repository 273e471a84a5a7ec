// Heterogeneous workers: the proportional split, and synchronous SGD with uneven local
// batches still taking the global batch's step (ranks as threads).
#include "distributed/adaptive_split.hpp"

#include <gtest/gtest.h>

#include "tests/distributed/distributed_test_support.hpp"

namespace fedcore::distributed {
namespace {

using test_support::run_ranks;
using test_support::small_options;
using test_support::synthetic;

TEST(ProportionalSplit, FollowsThroughputKeepsTheMinimumAndTheTotal) {
  const std::vector<double> three_to_one{300.0, 100.0};
  // 16 - 2 x 2 = 12 spare: 9 and 3 on top of the minimum.
  EXPECT_EQ(proportional_split(16, three_to_one, 2), (std::vector<int>{11, 5}));
  // A rank 100x slower still gets its minimum.
  const std::vector<double> lopsided{1000.0, 10.0};
  EXPECT_EQ(proportional_split(16, lopsided, 2), (std::vector<int>{14, 2}));
  // Equal remainders go to the lower rank; the sum is exact.
  const std::vector<double> equal{1.0, 1.0, 1.0};
  EXPECT_EQ(proportional_split(10, equal, 1), (std::vector<int>{4, 3, 3}));
  // Nothing measured: an even split.
  const std::vector<double> none{0.0, 0.0};
  EXPECT_EQ(proportional_split(8, none, 1), (std::vector<int>{4, 4}));
}

TEST(AdaptiveSplit, StartsUniformAndScalesGradientsByShare) {
  AdaptiveSplit split(2, 8, {true, 5, 2});
  EXPECT_EQ(split.split(), (std::vector<int>{8, 8}));
  EXPECT_EQ(split.offset(1), 8);
  EXPECT_FLOAT_EQ(split.gradient_scale(0), 1.0f);
}

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
  return worst;
}

// Rank 1 computes 4x slower; the split moves samples to rank 0 every step; and whatever
// split each step used, the parameters equal one process training on the global batch
// (the cnn has no BatchNorm), because every step's averaged gradient is the global one.
TEST(AdaptiveSplit, UnevenSharesStillTakeTheGlobalBatchsStep) {
  const auto data = synthetic(160);
  auto two = small_options();
  two.epochs = 1;
  two.adaptive = {true, 1, 2};
  two.test_slow_rank = 1;
  two.test_slowdown = 4.0;
  const auto adaptive = run_ranks(2, data, two);
  ASSERT_FALSE(adaptive[0].splits.empty());
  const auto& last = adaptive[0].splits.back().split;
  EXPECT_EQ(last[0] + last[1], 16);
  EXPECT_GT(last[0], last[1]) << "the slowed rank should train on fewer samples";
  EXPECT_EQ(adaptive[0].params, adaptive[1].params);
  auto one = small_options();
  one.epochs = 1;
  one.batch_size = 16;
  const auto single = run_ranks(1, data, one);
  EXPECT_LT(max_difference(adaptive[0].params, single[0].params), 1e-4);
  // Each rank reports the samples it actually trained on.
  EXPECT_DOUBLE_EQ(adaptive[0].ranks[0].samples + adaptive[0].ranks[1].samples,
                   single[0].ranks[0].samples);
}

TEST(AdaptiveSplit, IsRefusedWithEasgd) {
  auto o = small_options();
  o.adaptive.enabled = true;
  o.easgd_alpha = 0.4f;
  collective::InProcessGroup group(1);
  using namespace std::chrono_literals;
  collective::Communicator comm(group.transport(0), "adaptive-easgd", 5s);
  auto result = train_data_parallel(comm, synthetic(64), o);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, errc::invalid_argument);
}

}  // namespace
}  // namespace fedcore::distributed
