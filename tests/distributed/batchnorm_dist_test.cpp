// BatchNorm in the datacenter jobs: what statistics each rank normalises with, what happens
// to the running statistics, and the accuracy-per-epoch curve, for data parallelism and
// pipelines (ranks as threads). A small MobileNetV2 (width 0.25) on the 8x8 synthetic set.
#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

#include "distributed/layer_stack.hpp"
#include "distributed/pipeline.hpp"
#include "shared/model/loss.hpp"
#include "shared/model/trainer.hpp"
#include "tests/distributed/distributed_test_support.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::distributed {
namespace {

using test_support::run_ranks;
using test_support::synthetic;

TrainOptions mobilenet_options() {
  auto o = test_support::small_options();
  auto spec = model::parse_model_spec(
      std::string_view(R"({"type":"mobilenetv2","width":0.25,"dropout":0})"));
  EXPECT_TRUE(spec) << spec.error().to_string();
  o.spec = *model::complete_spec(*spec, {8, 8, 1}, 4);
  o.optimizer.learning_rate = 0.05f;
  o.batch_size = 4;
  o.epochs = 1;
  return o;
}

double max_difference(std::span<const float> a, std::span<const float> b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
  return worst;
}

// The samples the DDP job's global batch 0 holds, in slot order (ShardedBatches' shuffle).
std::vector<std::size_t> first_global_batch(std::size_t n, std::size_t count, std::uint64_t seed) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  Rng rng(seed * 1'000'003 + 0 + 1);
  rng.shuffle(std::span<std::size_t>(order));
  order.resize(count);
  return order;
}

struct Batch {
  Matrix x;
  std::vector<std::int32_t> y;
};

Batch gather(const data::Dataset& d, std::span<const std::size_t> indices) {
  Batch b{
      Matrix(static_cast<Eigen::Index>(d.sample_size()), static_cast<Eigen::Index>(indices.size())),
      {}};
  for (std::size_t j = 0; j < indices.size(); ++j) {
    b.x.col(static_cast<Eigen::Index>(j)) = d.features.col(static_cast<Eigen::Index>(indices[j]));
    b.y.push_back(d.labels[indices[j]]);
  }
  return b;
}

// Data parallelism: each rank normalises with its own local batch (no SyncBatchNorm), so
// one step of 2 ranks x 4 samples equals averaging the gradients of two single-process
// passes over the two halves; and the running statistics end as the average of what each
// rank's half would give.
TEST(BatchNormDdp, EachRankNormalisesItsLocalBatchAndRunningStatisticsAreAveraged) {
  const auto data = synthetic(64);
  auto o = mobilenet_options();
  o.max_steps = 1;
  o.evaluate = false;
  const auto ranks = run_ranks(2, data, o);

  auto built = model::build_model(o.spec);
  ASSERT_TRUE(built);
  built->initialize(o.seed);
  LayerStack stack(*built, 0, built->layer_count());
  const std::vector<float> initial_state(stack.state().begin(), stack.state().end());
  ASSERT_FALSE(initial_state.empty());
  const auto indices = first_global_batch(data.train.size(), 8, o.seed);
  std::vector<float> grads(stack.params().size(), 0.0f), state(initial_state.size(), 0.0f);
  Matrix g;
  for (int half = 0; half < 2; ++half) {
    std::copy(initial_state.begin(), initial_state.end(), stack.state().begin());
    const auto batch = gather(data.train, std::span(indices).subspan(half * 4, 4));
    const Matrix& out = stack.forward(batch.x, model::Phase::train);
    model::evaluate_loss(model::loss_for(o.spec), out, batch.y, &g);
    stack.backward(g, nullptr);
    for (std::size_t i = 0; i < grads.size(); ++i)
      grads[i] += 0.5f * stack.grads()[i];
    for (std::size_t i = 0; i < state.size(); ++i)
      state[i] += 0.5f * stack.state()[i];
  }
  auto optimizer = model::make_optimizer(o.optimizer, grads.size());
  optimizer->step(stack.params(), grads);

  EXPECT_LT(max_difference(ranks[0].params, stack.params()), 1e-5);
  EXPECT_EQ(ranks[0].params, ranks[1].params);
  // Both ranks hold the averaged statistics (the LayerStack result is the rank's own).
  ASSERT_EQ(ranks[0].state.size(), state.size());
  EXPECT_LT(max_difference(ranks[0].state, state), 1e-5);
  EXPECT_EQ(ranks[0].state, ranks[1].state);
  EXPECT_GT(max_difference(state, initial_state), 1e-3);  // the statistics did move
}

// The curve has one point per epoch, its training time grows, and its last accuracy is what
// rank 0's final model (parameters and averaged statistics) scores.
TEST(BatchNormDdp, EveryEpochIsEvaluatedWithTheAveragedStatistics) {
  const auto data = synthetic(128, 64, 1.0f);
  auto o = mobilenet_options();
  o.epochs = 3;
  o.evaluate_every_epoch = true;
  const auto ranks = run_ranks(2, data, o);
  ASSERT_EQ(ranks[0].curve.size(), 3u);
  EXPECT_EQ(ranks[1].curve.size(), 3u);
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(ranks[0].curve[e].epoch, e + 1);
    EXPECT_GE(ranks[0].curve[e].test_accuracy, 0.0);
    EXPECT_EQ(ranks[0].curve[e].test_accuracy, ranks[1].curve[e].test_accuracy);
  }
  EXPECT_LT(ranks[0].curve[0].train_seconds, ranks[0].curve[2].train_seconds);
  auto built = model::build_model(o.spec);
  ASSERT_TRUE(built);
  std::copy(ranks[0].params.begin(), ranks[0].params.end(), built->params().begin());
  std::copy(ranks[0].state.begin(), ranks[0].state.end(), built->state().begin());
  const auto eval = model::evaluate(*built, model::loss_for(o.spec), data.test);
  EXPECT_DOUBLE_EQ(ranks[0].curve.back().test_accuracy, eval.accuracy);
  EXPECT_DOUBLE_EQ(ranks[0].test_accuracy, eval.accuracy);
}

TEST(BatchNormDdp, AugmentationIsSeededAndChangesTheBatches) {
  const auto data = synthetic(64);
  auto o = mobilenet_options();
  o.max_steps = 2;
  o.evaluate = false;
  o.augmentation = {2, true};
  const auto a = run_ranks(2, data, o);
  const auto b = run_ranks(2, data, o);
  EXPECT_EQ(a[0].params, b[0].params);
  o.augmentation = {};
  const auto plain = run_ranks(2, data, o);
  EXPECT_NE(a[0].params, plain[0].params);
}

// The running statistics are in the checkpoint: a job stopped after step 7 and resumed from
// its step-5 checkpoint ends with the statistics (and parameters) of one that never stopped.
TEST(BatchNormDdp, ResumedJobRestoresTheRunningStatistics) {
  const auto data = synthetic(128);
  testing::TempDir stopped_dir, straight_dir;
  auto o = mobilenet_options();
  o.epochs = 2;
  o.evaluate = false;
  o.checkpoint_every = 5;
  o.checkpoint_dir = stopped_dir.path();
  o.max_steps = 7;
  (void)run_ranks(2, data, o);
  o.max_steps = 12;
  const auto resumed = run_ranks(2, data, o);
  EXPECT_EQ(resumed[0].start_step, 5u);
  o.checkpoint_dir = straight_dir.path();  // checkpoints (and their averaging) at 5 and 10
  const auto straight = run_ranks(2, data, o);
  EXPECT_LT(max_difference(resumed[0].params, straight[0].params), 1e-5);
  EXPECT_LT(max_difference(resumed[0].state, straight[0].state), 1e-5);
}

TEST(BatchNormParameterServer, RefusesAModelWithRunningStatistics) {
  using namespace std::chrono_literals;
  auto o = mobilenet_options();
  o.async = AsyncMode::parameter_server;
  const auto data = synthetic(64);
  collective::InProcessGroup group(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      collective::Communicator comm(group.transport(r), "ps-bn", 5s);
      auto result = train_data_parallel(comm, data, o);
      errors[r] = result ? "" : result.error().message;
    });
  }
  for (auto& t : threads)
    t.join();
  for (const auto& e : errors)
    EXPECT_NE(e.find("BatchNorm running statistics"), std::string::npos) << e;
}

// A pipeline normalises each micro-batch with its own statistics (as GPipe), and the
// recomputed forward before a backward does not count a micro-batch twice: two stages with
// two micro-batches equal one process that runs the micro-batches one after the other.
TEST(BatchNormPipeline, MicroBatchStatisticsAndNoDoubleCountingOnRecompute) {
  const auto data = synthetic(64);
  PipelineOptions p;
  p.train = mobilenet_options();
  p.train.batch_size = 8;
  p.train.max_steps = 1;
  p.train.evaluate = false;
  p.stages = 2;
  p.micro_batches = 2;
  p.schedule = Schedule::one_f_one_b;
  const auto results = test_support::run_pipeline_ranks(2, data, p);

  auto built = model::build_model(p.train.spec);
  ASSERT_TRUE(built);
  built->initialize(p.train.seed);
  LayerStack stack(*built, 0, built->layer_count());
  std::vector<std::size_t> order(data.train.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  Rng rng(p.train.seed * 1'000'003 + 1);
  rng.shuffle(std::span<std::size_t>(order));
  std::vector<float> grads(stack.params().size(), 0.0f);
  Matrix g;
  for (int m = 0; m < 2; ++m) {
    const auto batch = gather(data.train, std::span(order).subspan(m * 4, 4));
    const Matrix& out = stack.forward(batch.x, model::Phase::train);
    model::evaluate_loss(model::loss_for(p.train.spec), out, batch.y, &g);
    g *= 0.5f;
    stack.backward(g, nullptr);
    for (std::size_t i = 0; i < grads.size(); ++i)
      grads[i] += stack.grads()[i];
  }
  auto optimizer = model::make_optimizer(p.train.optimizer, grads.size());
  optimizer->step(stack.params(), grads);

  for (const auto& st : results) {
    const auto expected = stack.params().subspan(st.param_offset, st.params.size());
    EXPECT_LT(max_difference(st.params, expected), 1e-5) << "stage " << st.stage;
    const auto expected_state = stack.state().subspan(st.state_offset, st.state.size());
    EXPECT_LT(max_difference(st.state, expected_state), 1e-6) << "stage " << st.stage;
  }
  EXPECT_EQ(results[0].state.size() + results[1].state.size(), stack.state().size());
}

TEST(BatchNormPipeline, HybridEvaluatesTheGatheredModelEveryEpoch) {
  const auto data = synthetic(128, 64, 1.0f);
  PipelineOptions p;
  p.train = mobilenet_options();
  p.train.batch_size = 8;
  p.train.epochs = 2;
  p.train.evaluate_every_epoch = true;
  p.stages = 2;
  p.micro_batches = 2;
  const auto results = test_support::run_pipeline_ranks(4, data, p);
  // Replicas of a stage hold the same parameters and, after averaging, the same statistics.
  EXPECT_EQ(results[0].params, results[2].params);
  EXPECT_EQ(results[0].state, results[2].state);
  EXPECT_EQ(results[1].state, results[3].state);
  for (const auto& r : results) {
    ASSERT_EQ(r.curve.size(), 2u);
    EXPECT_EQ(r.curve[1].test_accuracy, results[0].curve[1].test_accuracy);
  }
  // The reported accuracy is the whole model's, put together from the stages.
  auto built = model::build_model(p.train.spec);
  ASSERT_TRUE(built);
  for (int s = 0; s < 2; ++s) {
    std::copy(results[s].params.begin(), results[s].params.end(),
              built->params().begin() + static_cast<std::ptrdiff_t>(results[s].param_offset));
    std::copy(results[s].state.begin(), results[s].state.end(),
              built->state().begin() + static_cast<std::ptrdiff_t>(results[s].state_offset));
  }
  const auto eval = model::evaluate(*built, model::loss_for(p.train.spec), data.test);
  EXPECT_DOUBLE_EQ(results[0].test_accuracy, eval.accuracy);
  EXPECT_DOUBLE_EQ(results[0].curve.back().test_accuracy, eval.accuracy);
}

}  // namespace
}  // namespace fedcore::distributed
