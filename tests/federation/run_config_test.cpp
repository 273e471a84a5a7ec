#include "server/federation/run_config.hpp"

#include <gtest/gtest.h>

namespace fedcore::federation {
namespace {

TEST(RunConfig, ParsesAFullConfigAndRoundTrips) {
  auto c =
      parse_run_config(R"({"name":"bc","model":{"type":"logreg"},"rounds":5,"clients_per_round":3,
    "min_clients":2,"local_epochs":2,"batch_size":16,"optimizer":{"kind":"sgd","lr":0.1},
    "round_timeout_s":30,"seed":7,"on_failed_round":"retry","max_retries":1})");
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->rounds, 5);
  EXPECT_EQ(c->clients_per_round, 3);
  EXPECT_FLOAT_EQ(c->optimizer.learning_rate, 0.1f);
  EXPECT_EQ(c->on_failed_round, FailedRoundPolicy::retry);
  auto again = parse_run_config(to_json_text(*c));
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(to_json_text(*again), to_json_text(*c));
}

TEST(RunConfig, RejectsBadFieldsByName) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"rounds":5})", "'model'"},
      {R"({"model":{"type":"rnn"}})", "'type'"},
      {R"({"model":{"type":"logreg"},"rounds":0})", "'rounds'"},
      {R"({"model":{"type":"logreg"},"rounds":2.5})", "'rounds'"},
      {R"({"model":{"type":"logreg"},"clients_per_round":2,"min_clients":3})", "'min_clients'"},
      {R"({"model":{"type":"logreg"},"clients_per_round":2,"fraction":0.5})", "not both"},
      {R"({"model":{"type":"logreg"},"fraction":1.5})", "'fraction'"},
      {R"({"model":{"type":"logreg"},"strategy":"fedprox"})", "proximal_mu"},
      {R"({"model":{"type":"logreg"},"optimizer":{"lr":-1}})", "'lr'"},
      {R"({"model":{"type":"logreg"},"round_timeout_s":0})", "'round_timeout_s'"},
      {R"({"model":{"type":"logreg"},"on_failed_round":"ignore"})", "'on_failed_round'"},
      {R"({"model":{"type":"logreg"},"roundz":3})", "unknown field 'roundz'"},
      {R"({"model":{"type":"logreg"},"manual":"yes"})", "'manual'"},
      {R"([])", "JSON object"},
  };
  for (const auto& [text, fragment] : cases) {
    auto c = parse_run_config(text);
    ASSERT_FALSE(c) << text;
    EXPECT_EQ(c.error().code, errc::invalid_argument);
    EXPECT_NE(c.error().message.find(fragment), std::string::npos) << c.error().message;
  }
}

TEST(RunConfig, MaxSamplesPerClientIsParsedValidatedAndKept) {
  auto absent = parse_run_config(R"({"model":{"type":"logreg"}})");
  ASSERT_TRUE(absent);
  EXPECT_EQ(absent->max_samples_per_client, 0u);  // no cap
  auto capped = parse_run_config(R"({"model":{"type":"logreg"},"max_samples_per_client":5000})");
  ASSERT_TRUE(capped) << capped.error().to_string();
  EXPECT_EQ(capped->max_samples_per_client, 5000u);
  auto again = parse_run_config(to_json_text(*capped));
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(again->max_samples_per_client, 5000u);
  auto largest =
      parse_run_config(R"({"model":{"type":"logreg"},"max_samples_per_client":4294967296})");
  ASSERT_TRUE(largest) << largest.error().to_string();
  EXPECT_EQ(largest->max_samples_per_client, std::uint64_t{1} << 32);
  for (const char* bad : {R"({"model":{"type":"logreg"},"max_samples_per_client":-1})",
                          R"({"model":{"type":"logreg"},"max_samples_per_client":2.5})",
                          R"({"model":{"type":"logreg"},"max_samples_per_client":"100"})",
                          R"({"model":{"type":"logreg"},"max_samples_per_client":4294967297})"}) {
    auto c = parse_run_config(bad);
    ASSERT_FALSE(c) << bad;
    EXPECT_EQ(c.error().code, errc::invalid_argument);
    EXPECT_NE(c.error().message.find("'max_samples_per_client'"), std::string::npos)
        << c.error().message;
  }
}

TEST(RunConfig, SamplesClientsPerRoundOrFraction) {
  auto fixed = parse_run_config(R"({"model":{"type":"logreg"},"clients_per_round":3})");
  EXPECT_EQ(clients_to_sample(*fixed, 10), 3u);
  EXPECT_EQ(clients_to_sample(*fixed, 2), 2u);
  auto fraction = parse_run_config(R"({"model":{"type":"logreg"},"fraction":0.25})");
  EXPECT_EQ(clients_to_sample(*fraction, 10), 3u);
  EXPECT_EQ(clients_to_sample(*fraction, 1), 1u);
}

}  // namespace
}  // namespace fedcore::federation
