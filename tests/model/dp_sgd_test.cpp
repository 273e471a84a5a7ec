// DP-SGD: the clip bounds every record's contribution, Poisson sampling draws the expected
// batch, the noise has the stated spread, and without clip or noise it is plain SGD.
// Every random source is seeded; every loop is bounded.
#include "shared/model/dp_sgd.hpp"

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"
#include "shared/util/rng.hpp"
#include "shared/util/threads.hpp"

namespace fedcore::model {
namespace {

// `count` records of `features` standard-normal features and uniform labels.
data::Dataset synthetic(std::size_t count, int features, int classes, std::uint64_t seed) {
  Rng rng(seed);
  data::Dataset d;
  d.features.resize(features, static_cast<Eigen::Index>(count));
  for (Eigen::Index j = 0; j < d.features.cols(); ++j) {
    for (Eigen::Index i = 0; i < d.features.rows(); ++i) {
      d.features(i, j) = static_cast<float>(rng.normal());
    }
    d.labels.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(classes))));
  }
  d.sample_shape = {features};
  d.num_classes = classes;
  return d;
}

struct Built {
  Model model;
  LossKind loss;
};

Built build(const char* json, const data::Dataset& data) {
  auto spec =
      complete_spec(*parse_model_spec(std::string_view(json)), data.sample_shape, data.num_classes);
  EXPECT_TRUE(spec) << spec.error().to_string();
  auto model = build_model(*spec);
  model->initialize(3);
  return {std::move(*model), loss_for(*spec)};
}

// Seeded sources for tests; production passes a CSPRNG.
struct Seeded {
  Rng normal_rng;
  Rng uniform_rng;
  std::size_t normals = 0;
  Seeded(std::uint64_t normal_seed, std::uint64_t uniform_seed)
      : normal_rng(normal_seed), uniform_rng(uniform_seed) {}
  DpRandom random() {
    return {[this](std::span<double> out) -> result<void> {
              normals += out.size();
              for (double& x : out) {
                x = normal_rng.normal();
              }
              return {};
            },
            [this](std::span<double> out) -> result<void> {
              for (double& x : out) {
                x = uniform_rng.uniform_double();
              }
              return {};
            }};
  }
};

// train_dp_sgd with sources that cannot fail: unwraps the result.
DpSgdReport dp_train(Model& model, LossKind loss, Optimizer& optimizer, const data::Dataset& data,
                     const DpSgdConfig& config, const DpRandom& random,
                     std::span<const float> anchor = {}, const DpSgdProgressFn& progress = {}) {
  auto report = train_dp_sgd(model, loss, optimizer, data, config, random, anchor, progress);
  EXPECT_TRUE(report) << report.error().to_string();
  return report ? *report : DpSgdReport{};
}

double l2_distance(std::span<const float> a, std::span<const float> b) {
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    sum += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  }
  return std::sqrt(sum);
}

class DpSgdPaths : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { set_compute_threads(1); }
};

// (a) q = 1, no noise and a clip nobody reaches: the step is the full-batch mean gradient.
TEST_P(DpSgdPaths, WithoutNoiseOrClippingFullBatchIsPlainSgd) {
  const auto data = synthetic(40, 6, 3, 1);
  auto plain = build(R"({"type":"mlp","hidden":[16]})", data);
  auto dp = build(R"({"type":"mlp","hidden":[16]})", data);
  const std::vector<float> initial(dp.model.params().begin(), dp.model.params().end());
  auto sgd_plain = make_optimizer({.learning_rate = 0.5f}, plain.model.param_count());
  auto sgd_dp = make_optimizer({.learning_rate = 0.5f}, dp.model.param_count());
  train(plain.model, plain.loss, *sgd_plain, data, {.epochs = 3, .batch_size = 40, .seed = 1});
  Seeded seeded(1, 2);
  const auto report = dp_train(dp.model, dp.loss, *sgd_dp, data,
                               {.epochs = 3,
                                .expected_batch = 40,
                                .clip_norm = 1e6,
                                .noise_multiplier = 0,
                                .batched_per_example = GetParam()},
                               seeded.random());
  EXPECT_EQ(report.batched, GetParam());
  EXPECT_EQ(report.steps, 3u);
  EXPECT_EQ(report.samples, 120u);
  EXPECT_EQ(report.clipped, 0u);
  EXPECT_DOUBLE_EQ(report.sampling_rate, 1.0);
  EXPECT_EQ(seeded.normals, 0u);
  EXPECT_GT(l2_distance(initial, dp.model.params()), 1e-2) << "the model did not move";
  for (std::size_t i = 0; i < dp.model.param_count(); ++i) {
    ASSERT_NEAR(dp.model.params()[i], plain.model.params()[i], 2e-5f) << "parameter " << i;
  }
}

// (b) One record with a huge loss moves the model by exactly lr * C / B, no more.
TEST_P(DpSgdPaths, AnOutliersContributionIsClippedToTheClipNorm) {
  auto outlier = synthetic(1, 6, 3, 2);
  outlier.features *= 1000.0f;
  auto built = build(R"({"type":"mlp","hidden":[16]})", outlier);
  const std::vector<float> initial(built.model.params().begin(), built.model.params().end());
  const float lr = 0.5f;
  const double clip = 0.25;
  auto sgd = make_optimizer({.learning_rate = lr}, built.model.param_count());
  Seeded seeded(1, 2);
  const auto report = dp_train(built.model, built.loss, *sgd, outlier,
                               {.expected_batch = 1,
                                .clip_norm = clip,
                                .noise_multiplier = 0,
                                .batched_per_example = GetParam()},
                               seeded.random());
  ASSERT_EQ(report.samples, 1u);
  EXPECT_EQ(report.clipped, 1u);
  EXPECT_NEAR(l2_distance(initial, built.model.params()), lr * clip, 1e-4 * lr * clip);

  // Without the clip the same record moves it far more, so the bound above is the clip's.
  auto unclipped = build(R"({"type":"mlp","hidden":[16]})", outlier);
  auto sgd2 = make_optimizer({.learning_rate = lr}, unclipped.model.param_count());
  train(unclipped.model, unclipped.loss, *sgd2, outlier, {.epochs = 1, .batch_size = 1});
  EXPECT_GT(l2_distance(initial, unclipped.model.params()), 100 * lr * clip);
}

// (b) With Poisson batches among ordinary records the update stays within
// lr * C * sampled / B at every step.
TEST_P(DpSgdPaths, EveryStepMovesAtMostLrTimesClipTimesSampledOverExpectedBatch) {
  auto data = synthetic(60, 6, 3, 4);
  data.features.col(7) *= 1000.0f;  // the outlier
  auto built = build(R"({"type":"mlp","hidden":[16]})", data);
  const float lr = 0.5f;
  const double clip = 0.1;
  const int expected_batch = 20;
  auto sgd = make_optimizer({.learning_rate = lr}, built.model.param_count());
  Seeded seeded(1, 5);
  std::vector<float> before(built.model.params().begin(), built.model.params().end());
  std::size_t steps = 0;
  const auto report =
      dp_train(built.model, built.loss, *sgd, data,
               {.epochs = 4,
                .expected_batch = expected_batch,
                .clip_norm = clip,
                .noise_multiplier = 0,
                .batched_per_example = GetParam()},
               seeded.random(), {}, [&](const DpSgdProgress& p) {
                 const double moved = l2_distance(before, built.model.params());
                 EXPECT_LE(moved, lr * clip * double(p.sampled) / expected_batch * (1 + 1e-5))
                     << "step " << p.step;
                 before.assign(built.model.params().begin(), built.model.params().end());
                 ++steps;
               });
  EXPECT_EQ(steps, 12u);  // 4 epochs of round(60 / 20)
  EXPECT_EQ(report.steps, 12u);
  EXPECT_GT(report.clipped, 0u);
}

// (b) Identical records have parallel gradients, so the clipped sum has norm C * sampled
// exactly and each step moves by lr * C * sampled / B: the normalization is by the
// expected batch B, not by the number sampled.
TEST_P(DpSgdPaths, IdenticalRecordsMoveByExactlyLrTimesClipTimesSampledOverExpectedBatch) {
  const auto one = synthetic(1, 6, 3, 16);
  std::vector<std::size_t> same(50, 0);
  const auto data = one.subset(same);
  auto built = build(R"({"type":"mlp","hidden":[16]})", data);
  const float lr = 0.5f;
  const double clip = 1e-3;  // far below any of these records' gradient norms
  const int expected_batch = 20;
  auto sgd = make_optimizer({.learning_rate = lr}, built.model.param_count());
  Seeded seeded(1, 17);
  std::vector<float> before(built.model.params().begin(), built.model.params().end());
  std::size_t off_expected = 0;
  const auto report =
      dp_train(built.model, built.loss, *sgd, data,
               {.epochs = 2,
                .expected_batch = expected_batch,
                .clip_norm = clip,
                .noise_multiplier = 0,
                .batched_per_example = GetParam()},
               seeded.random(), {}, [&](const DpSgdProgress& p) {
                 const double moved = l2_distance(before, built.model.params());
                 const double expected = lr * clip * double(p.sampled) / expected_batch;
                 EXPECT_NEAR(moved, expected, 1e-4 * expected + 1e-9) << "step " << p.step;
                 off_expected += p.sampled != std::size_t(expected_batch);
                 before.assign(built.model.params().begin(), built.model.params().end());
               });
  EXPECT_EQ(report.steps, 6u);  // 2 epochs of round(50 / 20) = 3
  EXPECT_EQ(report.clipped, report.samples);
  EXPECT_GT(off_expected, 0u) << "every batch had exactly B records; the test shows nothing";
}

// Both per-example paths compute the same update when clipping binds and noise is on.
TEST(DpSgd, BatchedPathMatchesThePerRecordPath) {
  set_compute_threads(1);
  const auto data = synthetic(50, 8, 4, 6);
  auto batched = build(R"({"type":"mlp","hidden":[12, 10]})", data);
  auto per_record = build(R"({"type":"mlp","hidden":[12, 10]})", data);
  auto sgd_a =
      make_optimizer({.learning_rate = 0.3f, .momentum = 0.9f}, batched.model.param_count());
  auto sgd_b =
      make_optimizer({.learning_rate = 0.3f, .momentum = 0.9f}, per_record.model.param_count());
  DpSgdConfig config{.epochs = 3, .expected_batch = 15, .clip_norm = 0.2, .noise_multiplier = 1};
  Seeded seeds_a(7, 8);
  Seeded seeds_b(7, 8);
  const auto a = dp_train(batched.model, batched.loss, *sgd_a, data, config, seeds_a.random());
  config.batched_per_example = false;
  const auto b =
      dp_train(per_record.model, per_record.loss, *sgd_b, data, config, seeds_b.random());
  EXPECT_TRUE(a.batched);
  EXPECT_FALSE(b.batched);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.clipped, b.clipped);
  EXPECT_GT(a.clipped, a.samples / 2) << "the clip should bind for this test to mean much";
  for (std::size_t i = 0; i < batched.model.param_count(); ++i) {
    ASSERT_NEAR(batched.model.params()[i], per_record.model.params()[i], 1e-4f)
        << "parameter " << i;
  }
}

TEST(DpSgd, DropoutModelsTakeThePerRecordPath) {
  set_compute_threads(1);
  const auto data = synthetic(20, 4, 3, 9);
  auto built = build(R"({"type":"mlp","hidden":[8],"dropout":0.25})", data);
  auto sgd = make_optimizer({.learning_rate = 0.1f}, built.model.param_count());
  Seeded seeded(1, 2);
  const auto report =
      dp_train(built.model, built.loss, *sgd, data, {.expected_batch = 5}, seeded.random());
  EXPECT_FALSE(report.batched);
  EXPECT_EQ(report.steps, 4u);
}

// (c) Poisson sampling: batch sizes have mean B and variance N q (1 - q); a fixed batch
// size would have none.
TEST(DpSgd, PoissonBatchSizesHaveTheBinomialMeanAndVariance) {
  set_compute_threads(1);
  const auto data = synthetic(1000, 2, 2, 10);
  auto built = build(R"({"type":"logreg"})", data);
  auto sgd = make_optimizer({.learning_rate = 0.1f}, built.model.param_count());
  Seeded seeded(1, 11);
  std::vector<double> sizes;
  const auto report = dp_train(
      built.model, built.loss, *sgd, data,
      {.epochs = 20, .expected_batch = 50, .clip_norm = 1, .noise_multiplier = 1}, seeded.random(),
      {}, [&](const DpSgdProgress& p) { sizes.push_back(double(p.sampled)); });
  ASSERT_EQ(sizes.size(), 400u);  // 20 epochs of round(1000 / 50)
  EXPECT_DOUBLE_EQ(report.sampling_rate, 0.05);
  const double mean = std::accumulate(sizes.begin(), sizes.end(), 0.0) / double(sizes.size());
  double var = 0;
  for (double s : sizes) {
    var += (s - mean) * (s - mean);
  }
  var /= double(sizes.size() - 1);
  // Mean 50 with standard error sqrt(47.5 / 400) = 0.34; variance 47.5, standard error ~3.4.
  EXPECT_NEAR(mean, 50.0, 1.5);
  EXPECT_NEAR(var, 47.5, 17.0);
  EXPECT_EQ(report.samples, static_cast<std::size_t>(mean * 400 + 0.5));
}

TEST(DpSgd, StepsPerEpochAreNOverBRoundedAndAtLeastOne) {
  EXPECT_EQ(dp_sgd_steps_per_epoch(1000, 50), 20u);
  EXPECT_EQ(dp_sgd_steps_per_epoch(1000, 300), 3u);
  EXPECT_EQ(dp_sgd_steps_per_epoch(60000, 256), 234u);
  EXPECT_EQ(dp_sgd_steps_per_epoch(10, 100), 1u);
}

// (d) Same batches with and without noise: the difference is the noise alone, lr z C / B
// per coordinate, one normal per parameter per step.
TEST(DpSgd, NoiseHasStdLrTimesZTimesClipOverExpectedBatch) {
  set_compute_threads(1);
  const auto data = synthetic(100, 20, 5, 12);
  auto clean = build(R"({"type":"mlp","hidden":[32]})", data);
  auto noisy = build(R"({"type":"mlp","hidden":[32]})", data);
  const float lr = 0.1f;
  const double clip = 0.5;
  const double z = 2.0;
  const int expected_batch = 20;
  auto sgd_clean = make_optimizer({.learning_rate = lr}, clean.model.param_count());
  auto sgd_noisy = make_optimizer({.learning_rate = lr}, noisy.model.param_count());
  DpSgdConfig config{.expected_batch = expected_batch, .clip_norm = clip, .max_steps = 1};
  Seeded clean_seeds(1, 13);
  Seeded noisy_seeds(1, 13);
  config.noise_multiplier = 0;
  dp_train(clean.model, clean.loss, *sgd_clean, data, config, clean_seeds.random());
  config.noise_multiplier = z;
  const auto report =
      dp_train(noisy.model, noisy.loss, *sgd_noisy, data, config, noisy_seeds.random());
  const std::size_t n = noisy.model.param_count();
  ASSERT_GT(n, 800u);
  EXPECT_EQ(report.steps, 1u);
  EXPECT_EQ(noisy_seeds.normals, n);
  double sum = 0;
  double sum_sq = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = double(noisy.model.params()[i]) - clean.model.params()[i];
    sum += d;
    sum_sq += d * d;
  }
  const double expected_std = lr * z * clip / expected_batch;  // 0.005
  const double mean = sum / double(n);
  const double std = std::sqrt(sum_sq / double(n) - mean * mean);
  // Standard errors: mean std/sqrt(n) (3.5%), std about std/sqrt(2n) (2.5%).
  EXPECT_NEAR(mean, 0.0, 5 * expected_std / std::sqrt(double(n)));
  EXPECT_NEAR(std, expected_std, 0.12 * expected_std);
}

// A record whose gradient is not finite is dropped rather than poisoning the sum.
TEST(DpSgd, ARecordWithANonFiniteGradientContributesNothing) {
  set_compute_threads(1);
  for (const bool batched : {true, false}) {
    auto data = synthetic(10, 4, 3, 14);
    data.features(2, 3) = std::numeric_limits<float>::infinity();
    auto built = build(R"({"type":"mlp","hidden":[8]})", data);
    auto sgd = make_optimizer({.learning_rate = 0.1f}, built.model.param_count());
    Seeded seeded(1, 2);
    const auto report = dp_train(built.model, built.loss, *sgd, data,
                                 {.expected_batch = 10,
                                  .clip_norm = 1,
                                  .noise_multiplier = 0.5,
                                  .batched_per_example = batched},
                                 seeded.random());
    EXPECT_EQ(report.samples, 10u);
    EXPECT_GE(report.clipped, 1u);
    for (const float p : built.model.params()) {
      ASSERT_TRUE(std::isfinite(p)) << (batched ? "batched" : "per record");
    }
  }
}

// A CSPRNG that fails must stop training with its error, not train without noise.
TEST(DpSgd, AFailingNoiseSourceStopsTrainingWithItsError) {
  set_compute_threads(1);
  const auto data = synthetic(20, 4, 3, 15);
  auto built = build(R"({"type":"mlp","hidden":[8]})", data);
  auto sgd = make_optimizer({.learning_rate = 0.1f}, built.model.param_count());
  Seeded seeded(1, 2);
  DpRandom random = seeded.random();
  int calls = 0;
  random.normal = [&calls](std::span<double>) -> result<void> {
    ++calls;
    return fail(errc::unavailable, "no entropy");
  };
  std::size_t steps = 0;
  const auto report = train_dp_sgd(built.model, built.loss, *sgd, data, {.expected_batch = 5},
                                   random, {}, [&](const DpSgdProgress&) { ++steps; });
  ASSERT_FALSE(report);
  EXPECT_EQ(report.error().code, errc::unavailable);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(steps, 0u) << "no step may be taken without its noise";
}

INSTANTIATE_TEST_SUITE_P(BothPaths, DpSgdPaths, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Batched" : "PerRecord";
                         });

}  // namespace
}  // namespace fedcore::model
