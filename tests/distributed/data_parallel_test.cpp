// The data-parallel job with ranks as threads (in-process transport) on a small synthetic
// data set: parameters bit-identical across ranks, equal to one worker with the global
// batch, overlap changes nothing, and checkpoint + resume equals an uninterrupted run
// (bit-exact resume with optimizer state: checkpoint_test.cpp).
#include "distributed/data_parallel.hpp"

#include <thread>

#include <gtest/gtest.h>

#include "distributed/layer_stack.hpp"
#include "shared/collective/inproc_transport.hpp"
#include "shared/util/threads.hpp"
#include "tests/distributed/distributed_test_support.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::distributed {
namespace {

using namespace std::chrono_literals;

using test_support::run_ranks;
using test_support::small_options;
using test_support::synthetic;

// Two runs of the same job in one process can differ in the last bits (the kernels' float
// summation order is not fixed from run to run here), so runs are compared to a tolerance
// far below one training step's change; ranks within a run are compared bit for bit.
double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
  }
  return worst;
}

TEST(DataParallel, ParametersAreBitIdenticalOnEveryRank) {
  const auto data = synthetic(240);
  const auto results = run_ranks(3, data, small_options());
  ASSERT_EQ(results[0].ranks.size(), 3u);
  for (const auto& r : results) {
    EXPECT_EQ(r.params, results[0].params);
    EXPECT_EQ(r.ranks[r.ranks.size() - 1].param_crc32, results[0].ranks[0].param_crc32);
  }
  // 240 samples, global batch 24: 10 steps per epoch, 2 epochs.
  EXPECT_EQ(results[0].steps, 20u);
  EXPECT_DOUBLE_EQ(results[0].samples, 20.0 * 24);
  EXPECT_GT(results[0].test_accuracy, 0.0);
}

TEST(DataParallel, TwoWorkersEqualOneWorkerWithTheGlobalBatch) {
  const auto data = synthetic(160);
  auto two = small_options();
  auto one = small_options();
  one.batch_size = two.batch_size * 2;
  const auto a = run_ranks(2, data, two);
  const auto b = run_ranks(1, data, one);
  ASSERT_EQ(a[0].params.size(), b[0].params.size());
  ASSERT_EQ(a[0].steps, b[0].steps);
  EXPECT_LT(max_difference(a[0].params, b[0].params), 1e-4) << "largest parameter difference";
  // And the run really trained: parameters moved from their initial values.
  auto initial = model::build_model(one.spec);
  ASSERT_TRUE(initial);
  initial->initialize(one.seed);
  EXPECT_NE(std::vector<float>(initial->params().begin(), initial->params().end()), b[0].params);
}

TEST(DataParallel, OverlappedAndSequentialAllreduceAgree) {
  const auto data = synthetic(160);
  auto overlapped = small_options();
  auto sequential = small_options();
  sequential.reducer.overlap = false;
  const auto a = run_ranks(2, data, overlapped);
  const auto b = run_ranks(2, data, sequential);
  EXPECT_LT(max_difference(a[1].params, b[1].params), 1e-5);
  EXPECT_EQ(a[0].params, a[1].params);
  EXPECT_EQ(b[0].params, b[1].params);
}

TEST(DataParallel, ResumeFromCheckpointEqualsAnUninterruptedRun) {
  const auto data = synthetic(160);
  testing::TempDir dir;
  auto options = small_options();
  options.checkpoint_dir = dir.path();
  options.checkpoint_every = 5;
  options.max_steps = 7;  // stops after step 7; the checkpoint holds step 5
  (void)run_ranks(2, data, options);
  options.max_steps = 12;
  const auto resumed = run_ranks(2, data, options);
  EXPECT_EQ(resumed[0].start_step, 5u);  // the first run's last checkpoint
  // An uninterrupted run to step 12 from scratch, without checkpoints.
  auto straight = small_options();
  straight.max_steps = 12;
  const auto reference = run_ranks(2, data, straight);
  EXPECT_LT(max_difference(resumed[0].params, reference[0].params), 1e-5);
  EXPECT_EQ(resumed[0].params, resumed[1].params);
}

TEST(DataParallel, RefusesATrainingSetSmallerThanOneGlobalBatch) {
  const auto data = synthetic(15);  // one global batch would be 16
  collective::InProcessGroup group(1);
  collective::Communicator comm(group.transport(0), "ddp-test", 5s);
  auto options = small_options();
  options.batch_size = 16;
  auto result = train_data_parallel(comm, data, options);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, errc::invalid_argument);
}

TEST(LayerStack, GradientsEqualTheModelsAndHookSeesEveryLayerLastFirst) {
  set_compute_threads(1);
  auto options = small_options();
  auto built = model::build_model(options.spec);
  ASSERT_TRUE(built);
  model::Model m = std::move(*built);
  m.initialize(3);
  LayerStack stack(m, 0, m.layer_count());
  ASSERT_EQ(std::vector<float>(stack.params().begin(), stack.params().end()),
            std::vector<float>(m.params().begin(), m.params().end()));
  const auto data = synthetic(16);
  const Matrix& a = m.forward(data.train.features, model::Phase::train);
  const Matrix& b = stack.forward(data.train.features, model::Phase::train);
  ASSERT_LT((a - b).cwiseAbs().maxCoeff(), 1e-5f);
  Matrix grad = Matrix::Ones(a.rows(), a.cols());
  std::vector<std::size_t> order;
  m.backward(grad);
  stack.backward(grad, nullptr, [&](std::size_t i) { order.push_back(i); });
  EXPECT_LT(max_difference(std::vector<float>(stack.grads().begin(), stack.grads().end()),
                           std::vector<float>(m.grads().begin(), m.grads().end())),
            1e-4);
  ASSERT_EQ(order.size(), m.layer_count());
  for (std::size_t k = 0; k < order.size(); ++k)
    EXPECT_EQ(order[k], m.layer_count() - 1 - k);
}

}  // namespace
}  // namespace fedcore::distributed

namespace fedcore::distributed {
namespace {

// EASGD: every rank ends with the same center variable (its result), the run learns, and
// with period 1 and alpha 1/world the center follows the replicas' mean closely.
TEST(Easgd, CenterIsIdenticalOnEveryRankAndLearns) {
  const auto data = synthetic(480);
  auto options = small_options();
  options.easgd_alpha = 0.9f / 3;
  options.easgd_period = 2;
  options.epochs = 3;
  const auto results = run_ranks(3, data, options);
  for (const auto& r : results)
    EXPECT_EQ(r.params, results[0].params);
  EXPECT_EQ(results[0].ranks[0].param_crc32, results[0].ranks[2].param_crc32);
  auto initial = model::build_model(options.spec);
  ASSERT_TRUE(initial);
  initial->initialize(options.seed);
  EXPECT_GT(max_difference(results[0].params, {initial->params().begin(), initial->params().end()}),
            1e-3);
  // Synthetic classes are separable: well above chance (0.25) after three epochs.
  EXPECT_GT(results[0].test_accuracy, 0.5);
}

}  // namespace
}  // namespace fedcore::distributed
