// Server optimizers (FedAvgM, FedAdagrad, FedAdam, FedYogi) against hand-computed steps,
// their options, and their state: saved beside a checkpoint and restored (the orphan sweep of
// state files is in orphan_checkpoints_test.cpp).
#include "server/federation/server_optimizer.hpp"

#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/federation/server_state_file.hpp"
#include "server/federation/strategy_config.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::federation {
namespace {

using Vector = std::vector<float>;

std::unique_ptr<Strategy> make(const std::string& name, double lr = 0.1) {
  StrategyConfig config;
  config.name = name;
  config.server_lr = lr;
  auto made = make_strategy(config, 3);
  EXPECT_TRUE(made) << (made ? "" : made.error().message);
  return made ? std::move(*made) : nullptr;
}

// One round in which a single site (weight 1) sends `update`: the mean is the update.
Vector round(Strategy& s, const Vector& global, const Vector& update) {
  s.begin_round(global, 1);
  s.add_update(update, 1);
  return s.finish_round();
}

// The three rounds of every expectation below, from x = (1, 2, 3): the mean moves the model
// by (1, 0, -1), then by (0, 1, 0), then to (0, 0, 0).
std::vector<Vector> three_rounds(Strategy& s) {
  std::vector<Vector> models;
  Vector x{1, 2, 3};
  x = round(s, x, {2, 2, 2});
  models.push_back(x);
  x = round(s, x, {x[0], 3, x[2]});
  models.push_back(x);
  x = round(s, x, {0, 0, 0});
  models.push_back(x);
  return models;
}

void expect_near(const Vector& got, const Vector& want, double tolerance = 2e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tolerance) << "parameter " << i;
  }
}

// Hand-computed from Reddi et al. 2021, Algorithm 2, with lr 0.1, beta1 0.9, beta2 0.99,
// tau 1e-3 and v_{-1} = tau^2. Round 1 for FedAdam, parameter 0: delta = 1, m = 0.1,
// v = 0.99e-6 + 0.01 = 0.01000099, x = 1 + 0.1 * 0.1 / (sqrt(0.01000099) + 0.001)
// = 1 + 0.01 / 0.10100495 = 1.0990050.
TEST(ServerOptimizer, FedAdamTakesThePapersSteps) {
  auto s = make("fedadam");
  const auto models = three_rounds(*s);
  expect_near(models[0], {1.0990050f, 2.0f, 2.9009950f});
  expect_near(models[1], {1.1885540f, 2.0990051f, 2.8114460f});
  expect_near(models[2], {1.1642392f, 2.0476099f, 2.6903547f});
  const auto state = s->state();
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(state->steps, 3);
  EXPECT_EQ(state->names, (std::vector<std::string>{"m", "v"}));
  expect_near({state->values[0], state->values[1], state->values[2]},
              {-0.0378554f, -0.1199005f, -0.3621446f});
  expect_near({state->values[3], state->values[4], state->values[5]},
              {0.02392858f, 0.05395919f, 0.08884426f});
}

// Yogi's v moves by (1 - beta2) delta^2 towards delta^2: round 1, parameter 1 (delta 0,
// v = tau^2 > 0) keeps v = 1e-6 - 0 = 1e-6; parameter 0 (v = 1e-6 < 1) grows to 0.010001.
TEST(ServerOptimizer, FedYogiTakesThePapersSteps) {
  auto s = make("fedyogi");
  const auto models = three_rounds(*s);
  expect_near(models[0], {1.0990050f, 2.0f, 2.9009950f});
  expect_near(models[1], {1.1881095f, 2.0990050f, 2.8118905f});
  expect_near(models[2], {1.1639177f, 2.0476572f, 2.6909363f});
  expect_near({s->state()->values[3], s->state()->values[4], s->state()->values[5]},
              {0.02411704f, 0.05405922f, 0.08906828f});
}

TEST(ServerOptimizer, FedAdagradTakesThePapersSteps) {
  auto s = make("fedadagrad");
  const auto models = three_rounds(*s);
  expect_near(models[0], {1.0099900f, 2.0f, 2.9900100f});
  expect_near(models[1], {1.0189810f, 2.0099900f, 2.9810190f});
  expect_near(models[2], {1.0175183f, 2.0050479f, 2.9689659f});
  expect_near({s->state()->values[3], s->state()->values[4], s->state()->values[5]},
              {2.038323f, 5.040061f, 9.886475f}, 2e-5);
}

// FedAvgM: m = 0.9 m + delta, x += 0.1 m. Round 3: m = 0.9 * (0.9, 1, -0.9) + (-1.19,
// -2.1, -2.81) = (-0.38, -1.2, -3.62); x = (1.19, 2.1, 2.81) + 0.1 m = (1.152, 1.98, 2.448).
TEST(ServerOptimizer, FedAvgMAddsMomentumToTheMeansStep) {
  auto s = make("fedavgm");
  const auto models = three_rounds(*s);
  expect_near(models[0], {1.1f, 2.0f, 2.9f});
  expect_near(models[1], {1.19f, 2.1f, 2.81f});
  expect_near(models[2], {1.152f, 1.98f, 2.448f});
  EXPECT_EQ(s->state()->names, (std::vector<std::string>{"m"}));
  EXPECT_EQ(s->state()->values.size(), 3u);
}

// With server_lr 1 and no momentum FedAvgM is FedAvg, weights included.
TEST(ServerOptimizer, FedAvgMWithoutMomentumIsFedAvg) {
  StrategyConfig config;
  config.name = "fedavgm";
  config.server_lr = 1;
  config.server_momentum = 0;
  auto s = make_strategy(config, 3);
  auto plain = make_strategy("fedavg", 3);
  ASSERT_TRUE(s && plain);
  const Vector global{0.5f, -1, 2};
  for (auto* strategy : {s->get(), plain->get()}) {
    strategy->begin_round(global, 4);
    strategy->add_update(Vector{1, 1, 1}, 1);
    strategy->add_update(Vector{0, -2, 4}, 3);
  }
  expect_near((*s)->finish_round(), (*plain)->finish_round(), 1e-6);
}

// Each round publishes a new snapshot: the one the checkpoint writer holds does not change
// under it while the next round finishes.
TEST(ServerOptimizer, AStateSnapshotDoesNotChangeWhenTheNextRoundFinishes) {
  auto s = make("fedadam");
  round(*s, {1, 2, 3}, {2, 2, 2});
  const auto held = s->state();
  const Vector before = held->values;
  round(*s, {1, 2, 3}, {0, 0, 0});
  EXPECT_EQ(held->values, before);
  EXPECT_NE(s->state()->values, before);
}

// Restoring the state after round 2 into a new strategy continues exactly as the first one.
TEST(ServerOptimizer, ARestoredStrategyContinuesAsIfNeverStopped) {
  auto first = make("fedyogi");
  Vector x = round(*first, {1, 2, 3}, {2, 2, 2});
  x = round(*first, x, {x[0], 3, x[2]});
  auto second = make("fedyogi");
  ASSERT_TRUE(second->restore(*first->state()));
  EXPECT_EQ(round(*second, x, {0, 0, 0}), round(*first, x, {0, 0, 0}));
}

TEST(ServerOptimizer, RefusesAnotherStrategysOrAMisshapenState) {
  auto adam = make("fedadam");
  auto momentum = make("fedavgm");
  auto refused = adam->restore(*momentum->state());
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message, "the saved state is fedavgm's, not fedadam's");
  ServerState wrong = *adam->state();
  wrong.values.pop_back();
  refused = adam->restore(wrong);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("not 2 of 3"), std::string::npos)
      << refused.error().message;
  ServerState negative = *adam->state();
  negative.values[4] = -1;
  refused = adam->restore(negative);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("negative v at 1"), std::string::npos)
      << refused.error().message;
  auto fedavg = make_strategy("fedavg", 3);
  EXPECT_EQ((*fedavg)->state(), nullptr);
  EXPECT_FALSE((*fedavg)->restore(*adam->state()));
}

TEST(ServerOptimizer, RefusesHyperParametersOutOfRange) {
  StrategyConfig config;
  config.name = "fedadam";
  config.tau = 0;
  auto made = make_strategy(config, 3);
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().message, "strategy_options.tau is 0.000000; it must be in (0, 1]");
  config.tau = 1e-3;
  config.beta2 = 1;
  made = make_strategy(config, 3);
  ASSERT_FALSE(made);
  EXPECT_NE(made.error().message.find("beta2"), std::string::npos);
  config.name = "fedsgd";
  made = make_strategy(config, 3);
  ASSERT_FALSE(made);
  EXPECT_NE(made.error().message.find("unknown strategy 'fedsgd'"), std::string::npos);
}

TEST(StrategyConfig, ReadsOnlyTheOptionsOfItsStrategy) {
  const JsonPath at("run config", "strategy_options");
  const auto options = nlohmann::json{{"server_lr", 0.05}, {"beta1", 0.5}, {"tau", 0.01}};
  auto parsed = parse_strategy_config("fedadagrad", &options, at);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->name, "fedadagrad");
  EXPECT_DOUBLE_EQ(parsed->server_lr, 0.05);
  EXPECT_DOUBLE_EQ(parsed->beta1, 0.5);
  EXPECT_DOUBLE_EQ(parsed->tau, 0.01);
  EXPECT_EQ(strategy_options_json(*parsed),
            (nlohmann::json{{"server_lr", 0.05}, {"beta1", 0.5}, {"tau", 0.01}}));

  const auto misplaced = nlohmann::json{{"beta2", 0.9}};
  parsed = parse_strategy_config("fedavgm", &misplaced, at);
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.error().message,
            "run config: 'strategy_options.beta2' does not apply to strategy \"fedavgm\"");
  const auto typo = nlohmann::json{{"server_learning_rate", 1}};
  parsed = parse_strategy_config("fedavgm", &typo, at);
  ASSERT_FALSE(parsed);
  EXPECT_NE(parsed.error().message.find("unknown key 'strategy_options.server_learning_rate'"),
            std::string::npos)
      << parsed.error().message;
  const auto zero = nlohmann::json{{"server_lr", 0}};
  EXPECT_FALSE(parse_strategy_config("fedadam", &zero, at));
  EXPECT_TRUE(parse_strategy_config("fedavg", nullptr, at));
}

TEST(ServerStateFile, RoundTripsBitForBitAndRefusesAnotherModelsSize) {
  fedcore::testing::TempDir temp;
  auto s = make("fedadam");
  round(*s, {1, 2, 3}, {2, 2, 2});
  const auto path = server_state_path(temp.path("run-1"), 4);
  EXPECT_EQ(path.filename(), "round-4.state.fcp");
  std::filesystem::create_directories(path.parent_path());
  ASSERT_TRUE(write_server_state(path, *s->state(), 3, nullptr));
  auto read = read_server_state(path, 3);
  ASSERT_TRUE(read) << read.error().message;
  EXPECT_EQ(read->strategy, "fedadam");
  EXPECT_EQ(read->steps, 1);
  EXPECT_EQ(read->names, s->state()->names);
  EXPECT_EQ(read->values, s->state()->values);
  auto other = read_server_state(path, 4);
  ASSERT_FALSE(other);
  EXPECT_NE(other.error().message.find("vector 'm' holds 3 values for a model of 4"),
            std::string::npos)
      << other.error().message;
  auto missing = read_server_state(temp.path("run-1/round-5.state.fcp"), 3);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::not_found);
}

}  // namespace
}  // namespace fedcore::federation
