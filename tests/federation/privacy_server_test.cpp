// The server's side of differential privacy: the privacy config and its compatibility
// rules, the budget's accounting, and DP-FedAvg's clipping, noise and adaptive clip.
#include <cmath>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/federation/dp_fedavg.hpp"
#include "server/federation/privacy_budget.hpp"
#include "server/federation/privacy_config.hpp"
#include "server/federation/run_config.hpp"
#include "shared/privacy/rdp_accountant.hpp"

namespace fedcore::federation {
namespace {

result<RunConfig> with(std::string_view extra, int min_clients = 3) {
  return parse_run_config(
      std::string(R"({"model":{"type":"logreg","input_shape":[4],"num_classes":2},)"
                  R"("rounds":10,"clients_per_round":5,"min_clients":)") +
      std::to_string(min_clients) + std::string(extra) + "}");
}

TEST(PrivacyConfig, ParsesKeepsAndRejectsBadFields) {
  auto c = with(R"(,"federated_evaluation":false,"privacy":{"secure_aggregation":{"degree":4},)"
                R"("dp":{"mode":"client_distributed","epsilon":4,"delta":1e-5,"clip_norm":0.5}})");
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_TRUE(c->privacy.secure_aggregation);
  EXPECT_EQ(c->privacy.secure_aggregation->settings.degree, 4u);
  EXPECT_EQ(c->privacy.dp.mode, protocol::DpMode::client_distributed);
  // Round trip through the stored JSON.
  auto again = parse_run_config(to_json_text(*c));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->privacy.dp.clip_norm, 0.5);
  EXPECT_TRUE(again->privacy.secure_aggregation);
  for (const char* bad :
       {R"(,"privacy":{"dp":{"mode":"record","epsilon":0,"delta":1e-5,"clip_norm":1}})",
        R"(,"privacy":{"dp":{"mode":"sometimes"}})",
        R"(,"privacy":{"dp":{"mode":"record","epsilon":1,"delta":1e-5}})",
        R"(,"privacy":{"secure_aggregation":{"quant_range":1}})",
        R"(,"privacy":{"secure_aggregation":{"colour":"red"}})", R"(,"privacy":[])"}) {
    auto refused = with(std::string(R"(,"federated_evaluation":false)") + bad);
    ASSERT_FALSE(refused) << bad;
    EXPECT_EQ(refused.error().code, errc::invalid_argument);
    EXPECT_NE(refused.error().message.find("privacy"), std::string::npos)
        << refused.error().message;
  }
}

// The compatibility matrix of docs/privacy.md, one refusal per forbidden cell.
TEST(PrivacyConfig, IncompatibleCombinationsAreRefusedWithANamedReason) {
  const std::string secure = R"("secure_aggregation":{})";
  const struct {
    std::string extra;
    std::string says;
    int min_clients;
  } cases[] = {
      {R"(,"federated_evaluation":false,"max_update_norm":5,"privacy":{)" + secure + "}",
       "max_update_norm", 3},
      {R"(,"federated_evaluation":false,"privacy":{)" + secure + "}", "min_clients >= 3", 2},
      {R"(,"federated_evaluation":false,"privacy":{"dp":{"mode":"client_distributed",)"
       R"("epsilon":1,"delta":1e-5,"clip_norm":1}})",
       "distributed DP", 3},
      {R"(,"privacy":{"dp":{"mode":"record","epsilon":1,"delta":1e-5,"clip_norm":1}})",
       "not covered by the privacy accountant", 3},
      {R"(,"federated_evaluation":false,"privacy":{)" + secure +
           R"(,"dp":{"mode":"record","epsilon":1,"delta":1e-5,"clip_norm":1,)"
           R"("adaptive_clip":{}}})",
       "adaptive clipping", 3},
  };
  for (const auto& c : cases) {
    auto refused = with(c.extra, c.min_clients);
    ASSERT_FALSE(refused) << c.extra;
    EXPECT_NE(refused.error().message.find("incompatible"), std::string::npos)
        << refused.error().message;
    EXPECT_NE(refused.error().message.find(c.says), std::string::npos) << refused.error().message;
  }
  // Allowed: record-level DP under secure aggregation; central DP with secure aggregation.
  EXPECT_TRUE(with(R"(,"federated_evaluation":false,"privacy":{)" + secure +
                   R"(,"dp":{"mode":"record","epsilon":8,"delta":1e-5,"clip_norm":1}})"));
  EXPECT_TRUE(with(R"(,"federated_evaluation":false,"privacy":{)" + secure +
                   R"(,"dp":{"mode":"client_central","epsilon":8,"delta":1e-5,"clip_norm":1}})"));
  // Adaptive clipping under secure aggregation: the sites clip and report the bit.
  for (const char* mode : {"client_central", "client_distributed"}) {
    EXPECT_TRUE(with(R"(,"federated_evaluation":false,"privacy":{)" + secure +
                     R"(,"dp":{"mode":")" + mode +
                     R"(","epsilon":8,"delta":1e-5,"clip_norm":1,"adaptive_clip":{}}})"))
        << mode;
  }
}

TEST(PrivacyBudget, CalibratedNoiseSpendsTheBudgetExactlyAtThePlannedRound) {
  DpConfig dp{protocol::DpMode::client_central, 2.0, 1e-5, 1.0, 0.0, std::nullopt};
  auto budget = PrivacyBudget::create(dp, 20, {1.0, 1});
  ASSERT_TRUE(budget) << budget.error().message;
  double eps = 0;
  for (int r = 1; r <= 20; ++r) {
    auto next = budget->epsilon_after_next({1.0, 1});
    ASSERT_TRUE(next);
    EXPECT_GT(*next, eps);  // every round costs
    eps = *budget->spend({1.0, 1});
  }
  EXPECT_LE(eps, 2.0);
  EXPECT_GT(eps, 2.0 * (1 - 1e-4));  // calibration is tight (bisection to 1e-6)
  // The 21st round would pass the budget.
  EXPECT_GT(*budget->epsilon_after_next({1.0, 1}), 2.0);
  // Independently: 20 full-batch Gaussian steps at that z give the same epsilon.
  auto accountant = privacy::RdpAccountant::create().value();
  ASSERT_TRUE(accountant.compose_poisson_gaussian(1.0, budget->noise_multiplier(), 20));
  EXPECT_NEAR(accountant.epsilon(1e-5)->epsilon, eps, 1e-12);
}

TEST(PrivacyBudget, RecordLevelAccountsTheSmallestSite) {
  DpConfig dp{protocol::DpMode::record, 8.0, 1e-5, 1.0, 1.1, std::nullopt};
  auto small = dp_round_shape(dp, 2, 32, 3200);
  ASSERT_TRUE(small);
  EXPECT_DOUBLE_EQ(small->q, 0.01);
  EXPECT_EQ(small->steps_per_round, 200u);      // 2 epochs of 100 steps
  EXPECT_FALSE(dp_round_shape(dp, 1, 32, 16));  // fewer records than a batch
  auto budget = PrivacyBudget::create(dp, 10, *small).value();
  ASSERT_TRUE(budget.spend(*small));
  // A larger site (q = 0.0005, 4000 steps a round) costs less than the small one; the
  // run's epsilon stays the small site's, and q and steps are never mixed across sites.
  const auto large = *dp_round_shape(dp, 2, 32, 64000);
  auto alone_small = PrivacyBudget::create(dp, 10, *small).value();
  ASSERT_TRUE(alone_small.spend(*small));
  auto alone_large = PrivacyBudget::create(dp, 10, large).value();
  ASSERT_TRUE(alone_large.spend(large));
  const double both = *budget.epsilon_after_next(large);
  EXPECT_DOUBLE_EQ(both, std::max(*alone_small.epsilon_after_next(*small),
                                  *alone_large.epsilon_after_next(large)));
  EXPECT_GT(*alone_small.epsilon_after_next(*small), *alone_large.epsilon_after_next(large));
}

TEST(PrivacyBudget, EverySitesShapeCountsNotOnlyTheSmallest) {
  // 150 records at batch 16: q = 0.107, 9 steps; 160 records: q = 0.1, 10 steps. Steps are
  // rounded per site, so neither is simply "the worst": the round costs the larger.
  DpConfig dp{protocol::DpMode::record, 8.0, 1e-5, 1.0, 0.0, std::nullopt};
  const DpRoundShape shapes[] = {*dp_round_shape(dp, 1, 16, 150), *dp_round_shape(dp, 1, 16, 160)};
  auto budget = PrivacyBudget::create(dp, 3, shapes).value();
  const double a = *budget.epsilon_after_next(shapes[0]);
  const double b = *budget.epsilon_after_next(shapes[1]);
  EXPECT_DOUBLE_EQ(*budget.epsilon_after_next(shapes), std::max(a, b));
  // Calibrated for the worse of the two: three rounds fit the budget for both sites.
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(budget.spend(shapes));
  }
  for (const auto& shape : shapes) {
    auto alone = PrivacyBudget::create(dp, 3, shape).value();
    EXPECT_LE(alone.noise_multiplier(), budget.noise_multiplier());
  }
  // The fourth round would pass it.
  EXPECT_GT(*budget.epsilon_after_next(shapes), 8.0);
}

TEST(PrivacyBudget, RestoredRoundsComposeWithTheirOwnNoiseAndShapes) {
  DpConfig dp{protocol::DpMode::record, 50.0, 1e-5, 1.0, 0.0, std::nullopt};
  const DpRoundShape a{0.1, 10};
  const DpRoundShape b{0.05, 20};
  auto budget = PrivacyBudget::with_noise_multiplier(dp, 1.5).value();
  budget.restore(std::span(&a, 1), 1.0);  // a round charged at z = 1
  budget.restore(std::span(&b, 1), 1.5);
  EXPECT_EQ(budget.rounds_spent(), 2);
  // The next round at z = 1.5, worst of a and b, each over all three rounds.
  double worst = 0;
  for (const auto& s : {a, b}) {
    auto accountant = privacy::RdpAccountant::create().value();
    ASSERT_TRUE(accountant.compose_poisson_gaussian(s.q, 1.0, s.steps_per_round));
    ASSERT_TRUE(accountant.compose_poisson_gaussian(s.q, 1.5, 2 * s.steps_per_round));
    worst = std::max(worst, accountant.epsilon(1e-5)->epsilon);
  }
  EXPECT_NEAR(*budget.epsilon_after_next(b), worst, 1e-12);
  EXPECT_FALSE(PrivacyBudget::with_noise_multiplier(dp, 0));
}

class ZeroNoise final : public privacy::NoiseSource {
 public:
  result<void> fill_standard_normal(std::span<double> out) override {
    std::fill(out.begin(), out.end(), 0.0);
    return {};
  }
};

TEST(DpFedAvg, ClipsEachUpdateWeighsThemEquallyAndDividesBySelected) {
  DpFedAvg strategy(2, 1.0, 0.0, std::make_unique<ZeroNoise>());
  const std::vector<float> global{1.0f, 1.0f};
  strategy.begin_round(global, 1u << 30);
  strategy.expect_clients(4);                                    // four selected, three answer
  strategy.add_update(std::vector<float>{1.3f, 1.4f}, 1000000);  // norm 0.5: kept
  strategy.add_update(std::vector<float>{4.0f, 5.0f}, 1);        // norm 5: clipped to (0.6, 0.8)
  strategy.add_update(std::vector<float>{1.0f, 1.0f}, 7);        // no change
  EXPECT_EQ(strategy.updates(), 3u);
  auto next = strategy.finish_round();
  EXPECT_EQ(strategy.clipped_last_round(), 1u);
  EXPECT_NEAR(next[0], 1.0f + (0.3f + 0.6f) / 4, 1e-5);
  EXPECT_NEAR(next[1], 1.0f + (0.4f + 0.8f) / 4, 1e-5);
}

TEST(DpFedAvg, NoiseOnTheSumHasStandardDeviationZC) {
  const std::size_t d = 20000;
  DpFedAvg strategy(d, 0.5, 2.0, std::make_unique<privacy::SeededNormal>(3));
  std::vector<float> global(d, 0.0f);
  strategy.begin_round(global, 1u << 30);
  strategy.expect_clients(1);
  strategy.add_update(global, 1);  // a zero update: the result is pure noise
  auto next = strategy.finish_round();
  double sum = 0, squares = 0;
  for (float v : next) {
    sum += v;
    squares += double(v) * v;
  }
  const double mean = sum / d;
  const double stddev = std::sqrt(squares / d - mean * mean);
  EXPECT_NEAR(stddev, 2.0 * 0.5, 0.03);  // z·C, within ~4 standard errors
  EXPECT_NEAR(mean, 0.0, 0.03);
}

TEST(DpFedAvg, AdaptiveClipFollowsTheUpdateNorms) {
  // All updates have norm 0.1, far below the initial clip of 10: the clip shrinks.
  auto adaptive = privacy::AdaptiveClip::create(10.0, 0.5, 0.5, 0.0).value();
  DpFedAvg strategy(1, 10.0, 0.0, std::make_unique<ZeroNoise>(), adaptive);
  std::vector<float> global{0.0f};
  double clip = 10.0;
  for (int round = 0; round < 60; ++round) {
    strategy.begin_round(global, 1u << 30);
    strategy.expect_clients(5);
    for (int c = 0; c < 5; ++c) {
      strategy.add_update(std::vector<float>{0.1f}, 1);
    }
    (void)strategy.finish_round();
    if (clip > 0.1) {
      EXPECT_LT(strategy.clip_norm(), clip) << "round " << round;  // above the norms: shrinks
    } else {
      EXPECT_GT(strategy.clip_norm(), clip) << "round " << round;  // below them: grows
    }
    clip = strategy.clip_norm();
  }
  // It reached the norms (from 10, at exp(-0.25) per round) and stays around them.
  EXPECT_GT(clip, 0.1 * std::exp(-0.3));
  EXPECT_LT(clip, 0.1 * std::exp(0.3));
}

}  // namespace
}  // namespace fedcore::federation
