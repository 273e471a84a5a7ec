// Pipeline and hybrid training with ranks as threads: the stages' parameters, put back
// together, equal single-process training on the whole batch to float tolerance, for
// both schedules; replicas of a stage stay bit-identical; and the stage partition.
#include "distributed/pipeline.hpp"

#include <numeric>
#include <thread>

#include <gtest/gtest.h>

#include "distributed/layer_stack.hpp"
#include "distributed/stage_balance.hpp"
#include "shared/collective/inproc_transport.hpp"
#include "shared/model/loss.hpp"
#include "shared/util/rng.hpp"
#include "shared/util/threads.hpp"
#include "tests/distributed/distributed_test_support.hpp"

namespace fedcore::distributed {
namespace {

using namespace std::chrono_literals;

data::TrainTest synthetic(std::size_t n) {
  data::TrainTest tt;
  Rng rng(11);
  tt.train.features.resize(64, static_cast<Eigen::Index>(n));
  tt.train.labels.resize(n);
  for (std::size_t j = 0; j < n; ++j) {
    const int label = static_cast<int>(rng.below(4));
    tt.train.labels[j] = label;
    for (int i = 0; i < 64; ++i) {
      tt.train.features(i, static_cast<Eigen::Index>(j)) =
          rng.uniform_float() + (i % 4 == label ? 0.5f : 0.0f);
    }
  }
  tt.train.sample_shape = {8, 8, 1};
  tt.train.num_classes = 4;
  return tt;
}

PipelineOptions options(int stages, int micro, Schedule schedule) {
  PipelineOptions o;
  auto spec = model::parse_model_spec(
      std::string_view(R"({"type":"cnn","channels":[4,8],"kernel":3,"dense":16})"));
  EXPECT_TRUE(spec);
  o.train.spec = *model::complete_spec(*spec, {8, 8, 1}, 4);
  o.train.optimizer.learning_rate = 0.1f;
  o.train.batch_size = 8;
  o.train.seed = 5;
  o.train.max_steps = 6;
  o.stages = stages;
  o.micro_batches = micro;
  o.schedule = schedule;
  return o;
}

// The whole model's parameters after `steps` single-process SGD steps on the batches a
// replica group of `replicas` sees together (batch × replicas samples per step).
std::vector<float> single_process(const data::TrainTest& data, const PipelineOptions& o,
                                  int replicas) {
  set_compute_threads(1);
  auto built = model::build_model(o.train.spec);
  model::Model m = std::move(*built);
  m.initialize(o.train.seed);
  LayerStack stack(m, 0, m.layer_count());
  auto opt = model::make_optimizer(o.train.optimizer, stack.params().size());
  const std::size_t batch = static_cast<std::size_t>(o.train.batch_size) * replicas;
  std::vector<std::size_t> order(data.train.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  Rng rng(o.train.seed * 1'000'003 + 1);
  rng.shuffle(std::span<std::size_t>(order));
  Matrix x(64, static_cast<Eigen::Index>(batch)), g;
  std::vector<std::int32_t> y(batch);
  for (std::size_t step = 0; step < o.train.max_steps; ++step) {
    for (std::size_t j = 0; j < batch; ++j) {
      x.col(static_cast<Eigen::Index>(j)) =
          data.train.features.col(static_cast<Eigen::Index>(order[step * batch + j]));
      y[j] = data.train.labels[order[step * batch + j]];
    }
    const Matrix& out = stack.forward(x, model::Phase::train);
    model::evaluate_loss(model::loss_for(o.train.spec), out, y, &g);
    stack.backward(g, nullptr);
    opt->step(stack.params(), stack.grads());
  }
  return {stack.params().begin(), stack.params().end()};
}

std::vector<PipelineResult> run(int world, const data::TrainTest& data, const PipelineOptions& o) {
  return test_support::run_pipeline_ranks(world, data, o);
}

void expect_matches(const std::vector<PipelineResult>& stages,
                    const std::vector<float>& reference) {
  std::size_t covered = 0;
  for (const auto& st : stages) {
    ASSERT_LE(st.param_offset + st.params.size(), reference.size());
    for (std::size_t i = 0; i < st.params.size(); ++i) {
      ASSERT_NEAR(st.params[i], reference[st.param_offset + i], 2e-5)
          << "stage " << st.stage << " param " << i;
    }
    covered += st.params.size();
  }
  EXPECT_EQ(covered, reference.size());
}

class Pipeline : public ::testing::TestWithParam<std::tuple<int, int, Schedule>> {};

TEST_P(Pipeline, EqualsSingleProcessTraining) {
  const auto [stages, micro, schedule] = GetParam();
  const auto data = synthetic(96);
  const auto o = options(stages, micro, schedule);
  const auto results = run(stages, data, o);
  expect_matches(results, single_process(data, o, 1));
  EXPECT_GE(results.back().final_loss, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Schedules, Pipeline,
                         ::testing::Values(std::tuple{2, 4, Schedule::gpipe},
                                           std::tuple{2, 4, Schedule::one_f_one_b},
                                           std::tuple{3, 2, Schedule::one_f_one_b},
                                           std::tuple{3, 8, Schedule::gpipe},
                                           std::tuple{2, 1, Schedule::one_f_one_b}));

TEST(Hybrid, TwoReplicasOfATwoStagePipelineEqualOneProcessWithTheGlobalBatch) {
  const auto data = synthetic(192);
  const auto o = options(2, 2, Schedule::one_f_one_b);
  const auto results = run(4, data, o);  // ranks: (d0,s0) (d0,s1) (d1,s0) (d1,s1)
  EXPECT_EQ(results[0].replicas, 2);
  EXPECT_EQ(results[0].params, results[2].params);  // stage 0 of both replicas: same bits
  EXPECT_EQ(results[1].params, results[3].params);
  expect_matches({results[0], results[1]}, single_process(data, o, 2));
}

TEST(Pipeline, RefusesMicroBatchesThatDoNotDivideTheBatch) {
  collective::InProcessGroup group(1);
  collective::Communicator comm(group.transport(0), "pipe-test", 5s);
  auto result = train_pipeline(comm, synthetic(32), options(1, 3, Schedule::gpipe));
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, errc::invalid_argument);
}

TEST(BalanceStages, MinimisesTheLargestStage) {
  const std::vector<double> costs{1, 1, 1, 10, 1, 1};
  EXPECT_EQ(balance_stages(costs, 2), (std::vector<std::size_t>{0, 3, 6}));
  EXPECT_EQ(balance_stages(costs, 3), (std::vector<std::size_t>{0, 3, 4, 6}));
  EXPECT_EQ(balance_stages(costs, 6), (std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(balance_stages(costs, 1), (std::vector<std::size_t>{0, 6}));
}

}  // namespace
}  // namespace fedcore::distributed
