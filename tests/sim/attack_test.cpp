// The malicious sites of fedcore-sim --attack: who they are and what they send.
#include "sim/attack.hpp"

#include <cmath>

#include <gtest/gtest.h>

namespace fedcore::sim {
namespace {

TEST(Attack, PlansRoundFractionTimesClientsAttackersTheSameForTheSameSeed) {
  const auto plan = plan_attack(AttackKind::sign_flip, 0, 0.2, 30, 1);
  EXPECT_EQ(plan.attackers(), 6u);
  EXPECT_EQ(plan.scale, 4);  // sign_flip's default
  EXPECT_EQ(plan_attack(AttackKind::sign_flip, 0, 0.2, 30, 1).malicious, plan.malicious);
  EXPECT_NE(plan_attack(AttackKind::sign_flip, 0, 0.2, 30, 2).malicious, plan.malicious);
  // The same sites whatever the attack: aggregators are compared on one set of attackers.
  EXPECT_EQ(plan_attack(AttackKind::scaled, 0, 0.2, 30, 1).malicious, plan.malicious);
  EXPECT_EQ(plan_attack(AttackKind::scaled, 0, 0.2, 30, 1).scale, 10);
  EXPECT_EQ(plan_attack(AttackKind::noise, 0.5, 1.0 / 3, 30, 1).attackers(), 10u);
  EXPECT_EQ(plan_attack(AttackKind::none, 0, 0, 30, 1).attackers(), 0u);
  EXPECT_EQ(plan_attack(AttackKind::label_flip, 0, 1.0, 7, 1).attackers(), 7u);
}

TEST(Attack, SignFlipReversesAndScalesTheStep) {
  AttackPlan plan = plan_attack(AttackKind::sign_flip, 0, 1.0, 1, 1);
  const std::vector<float> global{1, 2, 3};
  std::vector<float> params{2, 2, 1};  // the honest step: (1, 0, -2)
  apply_attack(plan, 0, 1, global, params);
  EXPECT_EQ(params, (std::vector<float>{-3, 2, 11}));  // global - 4 * step
}

TEST(Attack, ScaledMultipliesTheStepByTen) {
  AttackPlan plan = plan_attack(AttackKind::scaled, 0, 1.0, 1, 1);
  const std::vector<float> global{1, 2, 3};
  std::vector<float> params{1.5f, 2, 2};
  apply_attack(plan, 0, 1, global, params);
  EXPECT_EQ(params, (std::vector<float>{6, 2, -7}));
}

TEST(Attack, NoiseIsSeededPerSiteAndRoundWithTheGivenScale) {
  AttackPlan plan = plan_attack(AttackKind::noise, 2.0, 1.0, 2, 1);
  const std::vector<float> global(20000, 1.0f);
  std::vector<float> a(global.size(), 0.0f), b = a, again = a, other_round = a;
  apply_attack(plan, 0, 1, global, a);
  apply_attack(plan, 1, 1, global, b);
  apply_attack(plan, 0, 1, global, again);
  apply_attack(plan, 0, 2, global, other_round);
  EXPECT_EQ(a, again);
  EXPECT_NE(a, b);
  EXPECT_NE(a, other_round);
  double sum = 0, squares = 0;
  for (float v : a) {
    sum += v - 1.0;
    squares += (v - 1.0) * (v - 1.0);
  }
  const double n = static_cast<double>(a.size());
  EXPECT_NEAR(sum / n, 0.0, 0.05);
  EXPECT_NEAR(std::sqrt(squares / n), 2.0, 0.05);  // the scale is the noise's deviation
}

TEST(Attack, HonestSitesAndLabelFlippersHaveNoSeam) {
  const auto plan = plan_attack(AttackKind::scaled, 0, 0.5, 4, 1);
  std::size_t seams = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    seams += attack_seam(plan, i) ? 1 : 0;
  }
  EXPECT_EQ(seams, 2u);
  const auto flips = plan_attack(AttackKind::label_flip, 0, 1.0, 4, 1);
  EXPECT_FALSE(attack_seam(flips, 0));
  EXPECT_TRUE(flips.is_malicious(0));
}

}  // namespace
}  // namespace fedcore::sim
