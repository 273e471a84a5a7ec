// SCAFFOLD at the server (scaffold.hpp): the model step and the control variate's update
// against hand-computed rounds, its option, its state across a restart, and the Round's
// checks of the control variate an update carries.
#include "server/federation/scaffold.hpp"

#include <limits>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/federation/round.hpp"
#include "server/federation/strategy_config.hpp"

namespace fedcore::federation {
namespace {

using Vector = std::vector<float>;

std::unique_ptr<Strategy> make_scaffold_of(std::size_t n, double server_lr = 1.0) {
  StrategyConfig config;
  config.name = "scaffold";
  config.server_lr = server_lr;
  auto made = make_strategy(config, n);
  EXPECT_TRUE(made) << (made ? "" : made.error().message);
  return made ? std::move(*made) : nullptr;
}

Vector control_of(const Strategy& s) {
  const auto c = s.control();
  return {c.begin(), c.end()};
}

void expect_near(const Vector& got, const Vector& want, double tolerance = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tolerance) << "value " << i;
  }
}

// Round 1, x = (1, 2, 3), c = 0, four eligible sites of which two answer: site A (weight 1)
// y = (2, 2, 2), dc = (1, 0, -1); site B (weight 3) y = (0, 2, 4), dc = (3, 2, 1).
//   x <- (1*y_A + 3*y_B) / 4 = (0.5, 2, 3.5)          (server_lr 1: the weighted mean)
//   c <- 0 + (dc_A + dc_B) / 4 = (1, 0.5, 0)           (N = 4, not the 2 sampled)
// Round 2 with server_lr 0.5, two eligible, one answers: y = (1.5, 1, 3.5), dc = (-1, 1, 2).
//   x <- x + 0.5 * (y - x) = (1, 1.5, 3.5);  c <- c + dc / 2 = (0.5, 1, 1)
TEST(Scaffold, StepsTheModelAndAveragesControlChangesOverTheEligibleSites) {
  auto s = make_scaffold_of(3);
  EXPECT_TRUE(s->wants_control());
  expect_near(control_of(*s), {0, 0, 0});
  Vector x{1, 2, 3};
  s->begin_round(x, 5);
  s->expect_population(4);
  s->add_update(Vector{2, 2, 2}, 1);
  s->add_control(Vector{1, 0, -1});
  s->add_update(Vector{0, 2, 4}, 3);
  s->add_control(Vector{3, 2, 1});
  x = s->finish_round();
  expect_near(x, {0.5f, 2, 3.5f});
  expect_near(control_of(*s), {1, 0.5f, 0});

  auto half = make_scaffold_of(3, 0.5);
  ASSERT_TRUE(half->restore(*s->state()));
  half->begin_round(x, 2);
  half->expect_population(2);
  half->add_update(Vector{1.5f, 1, 3.5f}, 1);
  half->add_control(Vector{-1, 1, 2});
  x = half->finish_round();
  expect_near(x, {1, 1.5f, 3.5f});
  expect_near(control_of(*half), {0.5f, 1, 1});
  EXPECT_EQ(half->state()->steps, 2);
  EXPECT_EQ(half->state()->names, (std::vector<std::string>{"c"}));
}

// With c = 0 and server_lr 1 the first round is FedAvg's, bit for bit (same exact mean).
TEST(Scaffold, FirstRoundIsFedAvgBitForBit) {
  auto scaffold = make_scaffold_of(4);
  auto fedavg = std::move(*make_strategy("fedavg", 4));
  const Vector x{0.1f, -0.2f, 0.3f, 0.7f};
  const std::vector<std::pair<Vector, std::uint64_t>> updates{{{0.13f, -0.25f, 0.31f, 0.69f}, 17},
                                                              {{0.09f, -0.1f, 0.2f, 0.8f}, 5}};
  scaffold->begin_round(x, 23);
  fedavg->begin_round(x, 23);
  for (const auto& [u, w] : updates) {
    scaffold->add_update(u, w);
    scaffold->add_control(Vector(4, 0.25f));
    fedavg->add_update(u, w);
  }
  EXPECT_EQ(scaffold->finish_round(), fedavg->finish_round());
}

// A population reported smaller than the sites heard from (the eligible set shrank after
// selection) does not inflate c: the divisor is at least the number of changes.
TEST(Scaffold, DividesByAtLeastTheSitesHeardFrom) {
  auto s = make_scaffold_of(1);
  const Vector x{0};
  s->begin_round(x, 3);
  s->expect_population(1);
  s->add_update(Vector{1}, 1);
  s->add_control(Vector{2});
  s->add_update(Vector{1}, 1);
  s->add_control(Vector{4});
  (void)s->finish_round();
  expect_near(control_of(*s), {3});
}

TEST(Scaffold, RestoreRefusesAnotherStrategysOrANonFiniteState) {
  auto s = make_scaffold_of(2);
  ServerState other{"fedavgm", 1, {"m"}, {0, 0}};
  EXPECT_FALSE(s->restore(other));
  ServerState short_state{"scaffold", 1, {"c"}, {0}};
  EXPECT_FALSE(s->restore(short_state));
  ServerState bad{"scaffold", 1, {"c"}, {0, std::numeric_limits<float>::quiet_NaN()}};
  auto refused = s->restore(bad);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("not finite at 1"), std::string::npos);
  ServerState good{"scaffold", 4, {"c"}, {0.5f, -1}};
  ASSERT_TRUE(s->restore(good));
  expect_near(control_of(*s), {0.5f, -1});
}

TEST(Scaffold, TakesOnlyServerLrAsAnOption) {
  const auto at = JsonPath("strategy_options");
  const auto lr = nlohmann::json::parse(R"({"server_lr": 0.5})");
  auto parsed = parse_strategy_config("scaffold", &lr, at);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->server_lr, 0.5);
  EXPECT_EQ(strategy_options_json(*parsed), lr);
  const auto beta = nlohmann::json::parse(R"({"beta1": 0.5})");
  auto refused = parse_strategy_config("scaffold", &beta, at);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("does not apply to strategy \"scaffold\""),
            std::string::npos);
  StrategyConfig zero;
  zero.name = "scaffold";
  zero.server_lr = 0;
  EXPECT_FALSE(make_strategy(zero, 3));
}

// The Round's side: a SCAFFOLD update must carry one finite control value per parameter;
// a plain strategy refuses an update that carries any.
struct RoundFixture {
  model::ParamLayout layout;
  Vector global{0, 0, 0};
  std::unique_ptr<Strategy> strategy;
  std::map<std::string, std::string> nonces{
      {"a", std::string(32, 'a')}, {"b", std::string(32, 'b')}, {"c", std::string(32, 'c')}};

  explicit RoundFixture(std::unique_ptr<Strategy> s) : strategy(std::move(s)) {
    layout.append("w", {3});
    strategy->begin_round(global, 100);
  }
  Round make() {
    RoundSettings settings;
    settings.run_id = 1;
    settings.round = 1;
    settings.min_clients = 1;
    return Round(settings, nonces, global, layout, *strategy);
  }
  protocol::UpdateReport report(const std::string& client) {
    protocol::UpdateReport r;
    r.run_id = 1;
    r.round = 1;
    r.nonce = nonces.at(client);
    r.layout_fingerprint = layout.fingerprint_hex();
    r.samples = 10;
    return r;
  }
};

TEST(Scaffold, RoundRejectsAMissingShortOrNonFiniteControlAndFoldsAGoodOne) {
  RoundFixture f(make_scaffold_of(3));
  Round round = f.make();
  const Vector params{0.1f, 0.2f, 0.3f};
  std::string why;
  EXPECT_EQ(round.on_update("a", f.report("a"), params, 0, &why), UpdateVerdict::rejected);
  EXPECT_NE(why.find("needs the change of the site's control variate"), std::string::npos) << why;
  EXPECT_EQ(round.outcomes()[0].rejection, Rejection::control);
  const Vector nan_control{0, std::numeric_limits<float>::infinity(), 0};
  EXPECT_EQ(round.on_update("b", f.report("b"), params, 0, &why, nullptr, nan_control),
            UpdateVerdict::rejected);
  EXPECT_NE(why.find("not finite at index 1"), std::string::npos) << why;
  const Vector control{3, 0, -3};
  EXPECT_EQ(round.on_update("c", f.report("c"), params, 0, &why, nullptr, control),
            UpdateVerdict::accepted);
  ASSERT_TRUE(round.close().succeeded);
  f.strategy->expect_population(3);
  const auto next = f.strategy->finish_round();
  expect_near(next, params);
  expect_near(control_of(*f.strategy), {1, 0, -1});  // only the accepted change, over 3
  EXPECT_EQ(rejection_name(Rejection::control), "control");
}

TEST(Scaffold, PlainStrategyRejectsAnUpdateCarryingAControl) {
  RoundFixture f(std::move(*make_strategy("fedavg", 3)));
  Round round = f.make();
  std::string why;
  const Vector params{0.1f, 0.2f, 0.3f}, control{1, 1, 1};
  EXPECT_EQ(round.on_update("a", f.report("a"), params, 0, &why, nullptr, control),
            UpdateVerdict::rejected);
  EXPECT_NE(why.find("which strategy fedavg does not use"), std::string::npos) << why;
}

}  // namespace
}  // namespace fedcore::federation
