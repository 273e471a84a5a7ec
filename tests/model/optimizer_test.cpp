#include "shared/model/optimizer.hpp"

#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shared/model/proximal.hpp"

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

// Issue 19: exact messages for each kind of mistake, and the float rounding that used to
// let beta2 reach 1 (a division by zero in Adam's bias correction).
TEST(OptimizerConfig, StrictReadingNamesEveryProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"kind":"sgd","mometum":0.9})",
       "optimizer: unknown key 'mometum'; did you mean 'momentum'?"},
      {R"({"kind":"adam","lr":true})", "optimizer: 'lr' must be a number in (0, 100], got true"},
      {R"({"weight_decay":11})", "optimizer: 'weight_decay' must be a number in [0, 10], got 11"},
      {R"({"kind":"adam","beta2":0.9999999999})",
       "optimizer: 'beta2' must be a number in [0, 1), got 0.9999999999 (1 as a 32-bit float)"},
      {R"({"kind":"adam","epsilon":0})", "optimizer: 'epsilon' must be a number in (0, 1], got 0"},
      {R"({"lr":1e-60})",
       "optimizer: 'lr' must be a number in (0, 100], got 1e-60 (0 as a 32-bit float)"},
      {R"({"kind":"adam","nesterov":true})", "optimizer: 'nesterov' applies only to sgd"},
      {R"({"kind":"sgd","epsilon":1e-8})", "optimizer: 'epsilon' applies only to adam"},
  };
  for (const auto& [text, message] : cases) {
    auto config = optimizer_config_from_json(nlohmann::json::parse(text));
    ASSERT_FALSE(config) << text;
    EXPECT_EQ(config.error().message, message) << text;
  }
  auto inf = optimizer_config_from_json({{"lr", std::numeric_limits<double>::infinity()}});
  ASSERT_FALSE(inf);
  EXPECT_EQ(inf.error().message, "optimizer: 'lr' must be a number in (0, 100], got inf");
}

// Steps `a` `first` times, moves its state into a fresh `b`, then steps both `then` more
// times on the same parameters: the two must agree bit for bit.
void expect_state_carries_over(const OptimizerConfig& config) {
  const std::size_t n = 5;
  auto a = make_optimizer(config, n);
  std::vector<float> p{0.5f, -1.0f, 2.0f, 0.0f, 3.0f};
  auto gradient = [](int k, std::size_t i) { return std::sin(0.7f * k + 1.3f * i); };
  std::vector<float> g(n);
  for (int k = 0; k < 3; ++k) {
    for (std::size_t i = 0; i < n; ++i)
      g[i] = gradient(k, i);
    a->step(p, g);
  }
  auto b = make_optimizer(config, n);
  ASSERT_TRUE(b->load_state(a->state()));
  std::vector<float> q = p;
  for (int k = 3; k < 6; ++k) {
    for (std::size_t i = 0; i < n; ++i)
      g[i] = gradient(k, i);
    a->step(p, g);
    b->step(q, g);
  }
  EXPECT_EQ(p, q);
  // A fresh optimizer without the state goes elsewhere (the state matters).
  auto c = make_optimizer(config, n);
  std::vector<float> r = p;
  c->step(r, g);
  a->step(p, g);
  EXPECT_NE(p, r);
}

TEST(OptimizerState, SgdWithMomentumResumesExactly) {
  expect_state_carries_over({.learning_rate = 0.1f, .momentum = 0.9f});
}

TEST(OptimizerState, NesterovResumesExactly) {
  expect_state_carries_over({.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true});
}

TEST(OptimizerState, AdamResumesExactly) {
  expect_state_carries_over({.kind = OptimizerKind::adam, .learning_rate = 0.01f});
}

TEST(OptimizerState, ExportsNamedBuffersAndTheStepCount) {
  auto adam = make_optimizer({.kind = OptimizerKind::adam}, 3);
  std::vector<float> p(3, 1.0f);
  const std::vector<float> g{1.0f, 2.0f, 3.0f};
  adam->step(p, g);
  adam->step(p, g);
  const auto state = adam->state();
  EXPECT_EQ(state.kind, OptimizerKind::adam);
  EXPECT_EQ(state.steps, 2);
  ASSERT_EQ(state.buffers.size(), 2u);
  EXPECT_EQ(state.buffers[0].name, "m");
  EXPECT_EQ(state.buffers[1].name, "s");
  EXPECT_EQ(state.buffers[1].values.size(), 3u);
  // Plain SGD has no buffers, and its state is just the step count.
  auto sgd = make_optimizer({}, 3);
  EXPECT_TRUE(sgd->state().buffers.empty());
  sgd->reset();
  EXPECT_EQ(sgd->state().steps, 0);
}

TEST(OptimizerState, RejectsStateOfAnotherShapeNamingTheProblem) {
  auto sgd = make_optimizer({.learning_rate = 0.1f, .momentum = 0.9f}, 4);
  auto adam = make_optimizer({.kind = OptimizerKind::adam}, 4);
  auto plain = make_optimizer({}, 4);
  auto small = make_optimizer({.learning_rate = 0.1f, .momentum = 0.9f}, 3);
  OptimizerState negative = sgd->state();
  negative.steps = -1;
  OptimizerState infinite = sgd->state();
  infinite.buffers[0].values[2] = std::numeric_limits<float>::infinity();
  OptimizerState renamed = adam->state();
  std::swap(renamed.buffers[0].name, renamed.buffers[1].name);
  struct Case {
    const char* what;
    OptimizerState state;
    errc code;
    const char* fragment;
  };
  const Case cases[] = {
      {"adam state into sgd", adam->state(), errc::failed_precondition, "for adam"},
      {"sgd state into adam (checked below)", sgd->state(), errc::failed_precondition, "for sgd"},
      {"plain sgd into momentum sgd", plain->state(), errc::failed_precondition, "0 buffers"},
      {"3 values into 4", small->state(), errc::failed_precondition, "'velocity' has 3 values"},
      {"negative steps", negative, errc::invalid_argument, "negative step count"},
      {"infinite value", infinite, errc::invalid_argument, "not finite"},
  };
  for (const auto& c : cases) {
    Optimizer& target = std::string(c.what).starts_with("sgd state") ? *adam : *sgd;
    auto ok = target.load_state(c.state);
    ASSERT_FALSE(ok) << c.what;
    EXPECT_EQ(ok.error().code, c.code) << c.what;
    EXPECT_NE(ok.error().message.find(c.fragment), std::string::npos)
        << c.what << ": " << ok.error().message;
  }
  auto ok = adam->load_state(renamed);
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.error().message.find("buffer 's' where 'm'"), std::string::npos)
      << ok.error().message;
  // Momentum state into plain SGD: one buffer too many.
  ok = plain->load_state(sgd->state());
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.error().message.find("1 buffers"), std::string::npos) << ok.error().message;
}

TEST(OptimizerState, FailedLoadLeavesTheOptimizerUnchanged) {
  auto sgd = make_optimizer({.learning_rate = 0.1f, .momentum = 0.9f}, 2);
  std::vector<float> p{0.0f, 0.0f};
  const std::vector<float> g{1.0f, 1.0f};
  sgd->step(p, g);
  const auto before = sgd->state();
  auto bad = before;
  bad.buffers[0].values.push_back(1.0f);
  EXPECT_FALSE(sgd->load_state(bad));
  const auto after = sgd->state();
  EXPECT_EQ(after.steps, before.steps);
  EXPECT_EQ(after.buffers[0].values, before.buffers[0].values);
}

TEST(OptimizerState, LearningRateCanBeChangedBetweenSteps) {
  auto sgd = make_optimizer({.learning_rate = 0.1f}, 1);
  EXPECT_FLOAT_EQ(sgd->learning_rate(), 0.1f);
  sgd->set_learning_rate(0.05f);
  std::vector<float> p{0.0f};
  const std::vector<float> g{1.0f};
  sgd->step(p, g);
  EXPECT_FLOAT_EQ(p[0], -0.05f);
  auto adam = make_optimizer({.kind = OptimizerKind::adam, .learning_rate = 0.01f}, 1);
  adam->set_learning_rate(0.02f);
  adam->step(p, g);
  EXPECT_NEAR(p[0], -0.05f - 0.02f, 1e-6);
}

}  // namespace
}  // namespace fedcore::model
