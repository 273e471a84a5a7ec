// The site policy: parsing (a named error for every bad field), every refusal reason, the
// rounds-per-day window on a manual clock, and the server identity check.
#include "client/site_policy.hpp"

#include <limits>

#include <gtest/gtest.h>

namespace fedcore::client {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

protocol::TrainRequest request(std::string type = "logreg", std::int32_t epochs = 1) {
  protocol::TrainRequest r;
  r.run_id = 4;
  r.round = 1;
  r.model_spec = {{"type", std::move(type)}};
  r.settings.epochs = epochs;
  return r;
}

SitePolicy parsed(const json& j) {
  auto p = parse_site_policy(j);
  EXPECT_TRUE(p) << p.error().message;
  return p ? *p : SitePolicy{};
}

const std::string kFingerprint = "3f1a0b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";

TEST(SitePolicyParse, AFullPolicyIsReadFieldByField) {
  const auto p = parsed(json::parse(R"({
    "allowed_model_types": ["logreg", "mlp"], "max_parameters": 5000, "max_local_epochs": 3,
    "max_rounds_per_day": 2, "require_secure_aggregation": true, "max_epsilon": 4.5,
    "server": {"sha256": ["3F:1A:0B:2C:3D:4E:5F:60:71:82:93:A4:B5:C6:D7:E8:F9:0A:1B:2C:3D:4E:5F:60:71:82:93:A4:B5:C6:D7:E8"],
               "common_name": "fedcore-server"}})"));
  EXPECT_EQ(p.allowed_model_types, (std::vector<std::string>{"logreg", "mlp"}));
  EXPECT_EQ(p.max_parameters, 5000u);
  EXPECT_EQ(p.max_local_epochs, 3);
  EXPECT_EQ(p.max_rounds_per_day, 2u);
  EXPECT_TRUE(p.require_secure_aggregation);
  EXPECT_EQ(p.max_epsilon, 4.5);
  ASSERT_EQ(p.server.sha256.size(), 1u);
  EXPECT_EQ(p.server.sha256[0], kFingerprint);  // colons dropped, lower case
  EXPECT_EQ(p.server.common_name, "fedcore-server");
}

TEST(SitePolicyParse, AnEmptyPolicyLimitsNothing) {
  const auto p = parsed(json::object());
  EXPECT_TRUE(p.allowed_model_types.empty());
  EXPECT_FALSE(p.max_parameters || p.max_local_epochs || p.max_rounds_per_day || p.max_epsilon);
  EXPECT_FALSE(p.require_secure_aggregation);
  SitePolicyGate gate(p);
  auto r = request("cnn", 1000);
  r.privacy.dp = protocol::DpMode::none;
  EXPECT_FALSE(gate.check(r, std::size_t{1} << 30, Clock::steady_time{}));
}

TEST(SitePolicyParse, EveryBadFieldIsNamed) {
  struct {
    const char* policy;
    const char* message;
  } cases[] = {
      {R"([])", "client config: 'policy' must be a JSON object, got an array"},
      {R"({"allowed_model_types": "logreg"})",
       "client config: 'policy.allowed_model_types' must be a list of model types (logreg, mlp, "
       "cnn, external, mobilenetv2), got \"logreg\""},
      {R"({"allowed_model_types": ["logreg", 3]})",
       "client config: 'policy.allowed_model_types[1]' must be one of \"logreg\", \"mlp\", "
       "\"cnn\", \"external\", \"mobilenetv2\", got 3"},
      {R"({"allowed_model_types": [""]})",
       "client config: 'policy.allowed_model_types[0]' must be one of \"logreg\", \"mlp\", "
       "\"cnn\", \"external\", \"mobilenetv2\", got \"\""},
      {R"({"allowed_model_types": ["lgoreg"]})",
       "client config: 'policy.allowed_model_types[0]' must be one of \"logreg\", \"mlp\", "
       "\"cnn\", \"external\", \"mobilenetv2\", got \"lgoreg\"; did you mean \"logreg\"?"},
      {R"({"max_parameters": 0})",
       "client config: 'policy.max_parameters' must be an integer in [1, 1099511627776], got 0"},
      {R"({"max_parameters": -5})",
       "client config: 'policy.max_parameters' must be an integer in [1, 1099511627776], got -5"},
      {R"({"max_parameters": 1.5})",
       "client config: 'policy.max_parameters' must be an integer in [1, 1099511627776], got 1.5"},
      {R"({"max_parameters": "many"})",
       "client config: 'policy.max_parameters' must be an integer in [1, 1099511627776], got "
       "\"many\""},
      {R"({"max_parameters": 18446744073709551616})",
       "client config: 'policy.max_parameters' must be an integer in [1, 1099511627776], got "
       "1.8446744073709552e+19"},
      {R"({"max_local_epochs": 0})",
       "client config: 'policy.max_local_epochs' must be an integer in [1, 1000000], got 0"},
      {R"({"max_local_epochs": 2000000})",
       "client config: 'policy.max_local_epochs' must be an integer in [1, 1000000], got 2000000"},
      {R"({"max_local_epochs": 4294967297})",
       "client config: 'policy.max_local_epochs' must be an integer in [1, 1000000], got "
       "4294967297"},
      {R"({"max_rounds_per_day": -1})",
       "client config: 'policy.max_rounds_per_day' must be an integer in [1, 100000], got -1"},
      {R"({"max_rounds_per_day": true})",
       "client config: 'policy.max_rounds_per_day' must be an integer in [1, 100000], got true"},
      {R"({"require_secure_aggregation": "yes"})",
       "client config: 'policy.require_secure_aggregation' must be true or false, got \"yes\""},
      {R"({"max_epsilon": 0})",
       "client config: 'policy.max_epsilon' must be a number in (0, 1000000], got 0"},
      {R"({"max_epsilon": -1})",
       "client config: 'policy.max_epsilon' must be a number in (0, 1000000], got -1"},
      {R"({"max_epsilon": "8"})",
       "client config: 'policy.max_epsilon' must be a number in (0, 1000000], got \"8\""},
      {R"({"server": "fedcore-server"})",
       "client config: 'policy.server' must be a JSON object, got \"fedcore-server\""},
      {R"({"server": {"sha256": "abcd"}})",
       "client config: 'policy.server.sha256' must be 64 hex digits (colons allowed), as "
       "printed by `openssl x509 -noout -fingerprint -sha256`, got \"abcd\""},
      {R"({"server": {"sha256": []}})",
       "client config: 'policy.server.sha256' must name at least one fingerprint"},
      {R"({"server": {"sha256": ["zz" ]}})",
       "client config: 'policy.server.sha256[0]' must be 64 hex digits (colons allowed), as "
       "printed by `openssl x509 -noout -fingerprint -sha256`, got \"zz\""},
      {R"({"server": {"common_name": ""}})",
       "client config: 'policy.server.common_name' must not be empty"},
      {R"({"server": {"cn": "x"}})",
       "client config: unknown key 'policy.server.cn' (known keys: sha256, common_name)"},
      {R"({"max_epsilion": 8})",
       "client config: unknown key 'policy.max_epsilion'; did you mean 'policy.max_epsilon'?"},
  };
  for (const auto& c : cases) {
    auto p = parse_site_policy(json::parse(c.policy));
    ASSERT_FALSE(p) << c.policy;
    EXPECT_EQ(p.error().code, errc::invalid_argument) << c.policy;
    EXPECT_EQ(p.error().message, c.message) << c.policy;
  }
  auto inf = parse_site_policy(json{{"max_epsilon", std::numeric_limits<double>::infinity()}});
  ASSERT_FALSE(inf);
  EXPECT_EQ(inf.error().message,
            "client config: 'policy.max_epsilon' must be a number in (0, 1000000], got inf");
}

// Each reason, each with a request that passes every other limit.
TEST(SitePolicyCheck, EveryRefusalReasonIsReported) {
  SitePolicyGate gate(parsed(json::parse(R"({
    "allowed_model_types": ["logreg"], "max_parameters": 100, "max_local_epochs": 2,
    "require_secure_aggregation": true, "max_epsilon": 8})")));
  const auto now = Clock::steady_time{} + 1h;
  auto good = request();
  good.privacy.secure_aggregation = true;
  good.privacy.dp = protocol::DpMode::client_distributed;
  good.privacy.epsilon = 8;  // the limit itself is within it
  EXPECT_FALSE(gate.check(good, 100, now));

  auto expect = [&](const protocol::TrainRequest& r, std::size_t params, RefusalReason reason,
                    const char* words) {
    const auto refused = gate.check(r, params, now);
    ASSERT_TRUE(refused) << refusal_reason_name(reason);
    EXPECT_EQ(refused->reason, reason) << refused->words;
    EXPECT_NE(refused->words.find(words), std::string::npos) << refused->words;
  };
  auto cnn = good;
  cnn.model_spec = {{"type", "cnn"}};
  expect(cnn, 100, RefusalReason::model_type, "model type 'cnn' is not allowed");
  auto untyped = good;
  untyped.model_spec = json::object();
  expect(untyped, 100, RefusalReason::model_type, "model type '' is not allowed");
  expect(good, 101, RefusalReason::parameter_count, "101 parameters");
  auto long_training = good;
  long_training.settings.epochs = 3;
  expect(long_training, 100, RefusalReason::local_epochs, "3 local epochs");
  auto in_clear = good;
  in_clear.privacy.secure_aggregation = false;
  expect(in_clear, 100, RefusalReason::secure_aggregation, "secure aggregation is required");
  auto no_dp = good;
  no_dp.privacy.dp = protocol::DpMode::none;
  no_dp.privacy.epsilon = 0;
  expect(no_dp, 100, RefusalReason::dp_required, "differential privacy");
  auto weak = good;
  weak.privacy.epsilon = 8.01;
  expect(weak, 100, RefusalReason::epsilon, "epsilon 8.01");
  auto unbounded = good;
  unbounded.privacy.dp = protocol::DpMode::record;
  unbounded.privacy.epsilon = 0;  // DP on without a budget
  expect(unbounded, 100, RefusalReason::epsilon, "epsilon 0");
}

TEST(SitePolicyCheck, TheFirstFailingCheckInEnumOrderIsReported) {
  SitePolicyGate gate(parsed(json::parse(R"({"allowed_model_types": ["logreg"],
    "max_local_epochs": 1, "max_epsilon": 1})")));
  const auto refused = gate.check(request("mlp", 9), 10, Clock::steady_time{});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->reason, RefusalReason::model_type);
}

TEST(SitePolicyCheck, RoundsPerDayIsARolling24HourWindowOnTheInjectedClock) {
  ManualClock clock;
  SitePolicyGate gate(parsed(json::parse(R"({"max_rounds_per_day": 2})")));
  const auto r = request();
  EXPECT_FALSE(gate.admit(r, 10, clock.steady()));  // t = 0
  clock.advance(10h);
  EXPECT_FALSE(gate.admit(r, 10, clock.steady()));  // t = 10 h
  clock.advance(1h);
  // t = 11 h: two rounds in the window. A refusal does not count as a round.
  for (int i = 0; i < 3; ++i) {
    auto refused = gate.admit(r, 10, clock.steady());
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->reason, RefusalReason::rounds_per_day);
    EXPECT_NE(refused->words.find("already 2 rounds in the last 24 hours"), std::string::npos)
        << refused->words;
  }
  clock.advance(13h - 1ms);  // 1 ms before the first round leaves the window
  EXPECT_TRUE(gate.check(r, 10, clock.steady()));
  clock.advance(1ms);  // t = 24 h: the first round has left; one place is free
  EXPECT_FALSE(gate.admit(r, 10, clock.steady()));
  EXPECT_TRUE(gate.check(r, 10, clock.steady()));
  clock.advance(10h);  // t = 34 h: the round of t = 10 h has left
  EXPECT_FALSE(gate.check(r, 10, clock.steady()));
}

TEST(SitePolicyCheck, CheckAloneDoesNotCountARound) {
  ManualClock clock;
  SitePolicyGate gate(parsed(json::parse(R"({"max_rounds_per_day": 1})")));
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(gate.check(request(), 10, clock.steady()));
  }
  gate.record_round(clock.steady());
  EXPECT_TRUE(gate.check(request(), 10, clock.steady()));
}

TEST(SitePolicyServer, TheFingerprintAndTheNameMustBothMatchWhenBothAreSet) {
  SitePolicyGate gate(parsed(json{
      {"server", {{"sha256", {kFingerprint, std::string(64, 'b')}}, {"common_name", "fl-1"}}}}));
  EXPECT_FALSE(gate.check_server({kFingerprint, "fl-1"}));
  EXPECT_FALSE(gate.check_server({std::string(64, 'b'), "fl-1"}));  // the rotated one
  auto wrong_key = gate.check_server({std::string(64, 'c'), "fl-1"});
  ASSERT_TRUE(wrong_key);
  EXPECT_EQ(wrong_key->reason, RefusalReason::server_fingerprint);
  EXPECT_NE(wrong_key->words.find(std::string(64, 'c')), std::string::npos);
  auto wrong_name = gate.check_server({kFingerprint, "fl-2"});
  ASSERT_TRUE(wrong_name);
  EXPECT_EQ(wrong_name->reason, RefusalReason::server_name);
  EXPECT_NE(wrong_name->words.find("'fl-2' is not 'fl-1'"), std::string::npos);
}

TEST(SitePolicyServer, NoPinAcceptsAnyServerTheCaVouchesFor) {
  SitePolicyGate gate;
  EXPECT_FALSE(gate.check_server({std::string(64, 'c'), "anything"}));
}

TEST(SitePolicy, ReasonNamesAreStable) {
  EXPECT_EQ(refusal_reason_name(RefusalReason::model_type), "model_type");
  EXPECT_EQ(refusal_reason_name(RefusalReason::parameter_count), "parameter_count");
  EXPECT_EQ(refusal_reason_name(RefusalReason::local_epochs), "local_epochs");
  EXPECT_EQ(refusal_reason_name(RefusalReason::rounds_per_day), "rounds_per_day");
  EXPECT_EQ(refusal_reason_name(RefusalReason::secure_aggregation), "secure_aggregation");
  EXPECT_EQ(refusal_reason_name(RefusalReason::dp_required), "dp_required");
  EXPECT_EQ(refusal_reason_name(RefusalReason::epsilon), "epsilon");
  EXPECT_EQ(refusal_reason_name(RefusalReason::server_fingerprint), "server_fingerprint");
  EXPECT_EQ(refusal_reason_name(RefusalReason::server_name), "server_name");
}

}  // namespace
}  // namespace fedcore::client
