#include "model/optimizer.hpp"

#include <cmath>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/proximal.hpp"

namespace fedcore::model {
namespace {

TEST(Sgd, PlainStepWithWeightDecay) {
  auto sgd = make_optimizer({.learning_rate = 0.1f, .weight_decay = 0.5f}, 2);
  std::vector<float> p{1.0f, -2.0f};
  const std::vector<float> g{0.5f, 1.0f};
  sgd->step(p, g);
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.1f * (0.5f + 0.5f * 1.0f));
  EXPECT_FLOAT_EQ(p[1], -2.0f - 0.1f * (1.0f + 0.5f * -2.0f));
}

TEST(Sgd, MomentumStartsAtTheFirstGradient) {
  auto sgd = make_optimizer({.learning_rate = 0.1f, .momentum = 0.9f}, 1);
  std::vector<float> p{0.0f};
  const std::vector<float> g{1.0f};
  sgd->step(p, g);  // v = 1
  EXPECT_FLOAT_EQ(p[0], -0.1f);
  sgd->step(p, g);  // v = 0.9 + 1 = 1.9
  EXPECT_FLOAT_EQ(p[0], -0.1f - 0.19f);
  sgd->reset();
  sgd->step(p, g);  // fresh: v = 1
  EXPECT_FLOAT_EQ(p[0], -0.29f - 0.1f);
}

TEST(Sgd, NesterovLooksAhead) {
  auto sgd = make_optimizer({.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true}, 1);
  std::vector<float> p{0.0f};
  const std::vector<float> g{1.0f};
  sgd->step(p, g);  // v = 1, step = g + mu v = 1.9
  EXPECT_FLOAT_EQ(p[0], -0.19f);
  sgd->step(p, g);  // v = 1.9, step = 1 + 0.9 * 1.9 = 2.71
  EXPECT_FLOAT_EQ(p[0], -0.19f - 0.271f);
}

TEST(Adam, FirstStepsMoveByAboutTheLearningRate) {
  auto adam = make_optimizer({.kind = OptimizerKind::adam, .learning_rate = 0.01f}, 2);
  std::vector<float> p{1.0f, 1.0f};
  const std::vector<float> g{3.0f, -0.001f};
  adam->step(p, g);
  // Bias-corrected m / sqrt(s) is sign(g) on the first step.
  EXPECT_NEAR(p[0], 1.0f - 0.01f, 1e-6);
  EXPECT_NEAR(p[1], 1.0f + 0.01f, 1e-5);
  adam->step(p, g);
  EXPECT_NEAR(p[0], 1.0f - 0.02f, 1e-6);
}

TEST(Proximal, AddsPullTowardTheAnchorAndReturnsThePenalty) {
  const std::vector<float> params{1.0f, 2.0f};
  const std::vector<float> anchor{0.0f, 4.0f};
  std::vector<float> grads{0.5f, 0.5f};
  const double penalty = add_proximal_term(params, anchor, grads, 0.1f);
  EXPECT_NEAR(penalty, 0.5 * 0.1 * (1.0 + 4.0), 1e-7);
  EXPECT_FLOAT_EQ(grads[0], 0.5f + 0.1f * 1.0f);
  EXPECT_FLOAT_EQ(grads[1], 0.5f + 0.1f * -2.0f);
  EXPECT_EQ(add_proximal_term(params, anchor, grads, 0.0f), 0.0);
}

TEST(OptimizerConfig, ParsesAndRoundTrips) {
  auto config = optimizer_config_from_json(
      nlohmann::json::parse(R"({"kind":"sgd","lr":0.05,"momentum":0.9,"nesterov":true})"));
  ASSERT_TRUE(config) << config.error().to_string();
  EXPECT_FLOAT_EQ(config->learning_rate, 0.05f);
  EXPECT_TRUE(config->nesterov);
  auto again = optimizer_config_from_json(nlohmann::json(*config));
  ASSERT_TRUE(again);
  EXPECT_FLOAT_EQ(again->momentum, 0.9f);
}

TEST(OptimizerConfig, RejectsBadValuesNamingTheKey) {
  struct Case {
    const char* json;
    const char* fragment;
  };
  const Case cases[] = {{R"({"kind":"rmsprop"})", "'kind'"},
                        {R"({"lr":-1})", "'lr'"},
                        {R"({"lr":0})", "'lr'"},
                        {R"({"momentum":1.5})", "'momentum'"},
                        {R"({"lr":"fast"})", "'lr'"},
                        {R"({"speed":1})", "'speed'"},
                        {R"({"nesterov":true})", "'nesterov'"},
                        {R"([1,2])", "object"}};
  for (const auto& c : cases) {
    auto config = optimizer_config_from_json(nlohmann::json::parse(c.json));
    ASSERT_FALSE(config) << c.json;
    EXPECT_EQ(config.error().code, errc::invalid_argument);
    EXPECT_NE(config.error().message.find(c.fragment), std::string::npos) << config.error().message;
  }
}

}  // namespace
}  // namespace fedcore::model
