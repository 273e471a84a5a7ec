#include "sim/options.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace fedcore::sim {
namespace {

using ::testing::HasSubstr;

result<CommandLine> parse(std::vector<std::string> args) {
  return parse_command_line(args);
}

// The error's message for a command line that must be refused.
std::string refusal(std::vector<std::string> args) {
  auto line = parse(std::move(args));
  EXPECT_FALSE(line) << "accepted";
  if (line) {
    return "";
  }
  EXPECT_EQ(line.error().code, errc::invalid_argument);
  return line.error().message;
}

TEST(SimOptions, DefaultsAreValid) {
  auto line = parse({});
  ASSERT_TRUE(line) << line.error().to_string();
  EXPECT_FALSE(line->help);
  EXPECT_EQ(line->options.dataset, "fashion-mnist");
  EXPECT_EQ(line->options.threads, 1);
  EXPECT_EQ(line->options.transport, Transport::tls);
}

TEST(SimOptions, ParsesEveryOption) {
  auto line = parse({"--dataset",
                     "breast-cancer",
                     "--model",
                     "logreg",
                     "--partition",
                     "dirichlet:0.5",
                     "--clients",
                     "8",
                     "--clients-per-round",
                     "4",
                     "--rounds",
                     "7",
                     "--local-epochs",
                     "2",
                     "--batch",
                     "16",
                     "--lr",
                     "0.1",
                     "--momentum",
                     "0.9",
                     "--strategy",
                     "fedprox",
                     "--mu",
                     "0.01",
                     "--seed",
                     "42",
                     "--threads",
                     "2",
                     "--drop-prob",
                     "0.1",
                     "--slow-prob",
                     "0.2",
                     "--slow-factor",
                     "4",
                     "--out",
                     "x",
                     "--dashboard-port",
                     "8443",
                     "--baseline",
                     "--jsonl",
                     "--transport",
                     "inproc",
                     "--target",
                     "0.9",
                     "--target",
                     "0.95"});
  ASSERT_TRUE(line) << line.error().to_string();
  const auto& o = line->options;
  EXPECT_EQ(o.clients, 8u);
  EXPECT_EQ(o.clients_per_round, 4u);
  EXPECT_EQ(o.rounds, 7);
  EXPECT_EQ(o.local_epochs, 2);
  EXPECT_FLOAT_EQ(o.mu, 0.01f);
  EXPECT_EQ(o.seed, 42u);
  EXPECT_EQ(o.transport, Transport::inproc);
  EXPECT_TRUE(o.baseline);
  EXPECT_TRUE(o.jsonl);
  EXPECT_EQ(o.targets, (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(o.dashboard_port, 8443);
}

TEST(SimOptions, HelpIsNotAnError) {
  auto line = parse({"--help"});
  ASSERT_TRUE(line);
  EXPECT_TRUE(line->help);
  EXPECT_THAT(line->help_text, HasSubstr("--partition"));
  EXPECT_THAT(line->help_text, HasSubstr("--drop-prob"));
}

TEST(SimOptions, ErrorsNameTheOption) {
  EXPECT_THAT(refusal({"--bogus"}), HasSubstr("--bogus"));
  EXPECT_THAT(refusal({"--clients", "ten"}), HasSubstr("--clients"));
  EXPECT_THAT(refusal({"--dataset", "mnist"}), HasSubstr("--dataset must be"));
  EXPECT_THAT(refusal({"--dataset", "cifar10"}), HasSubstr("--data-path"));
  EXPECT_THAT(refusal({"--partition", "dirichlet:-1"}), HasSubstr("--partition"));
  EXPECT_THAT(refusal({"--partition", "zipf"}), HasSubstr("--partition"));
  EXPECT_THAT(refusal({"--clients", "0"}), HasSubstr("--clients must be at least 1"));
  EXPECT_THAT(refusal({"--clients", "4", "--clients-per-round", "5"}),
              HasSubstr("--clients-per-round 5 exceeds --clients 4"));
  EXPECT_THAT(refusal({"--fraction", "1.5"}), HasSubstr("--fraction"));
  EXPECT_THAT(refusal({"--rounds", "0"}), HasSubstr("--rounds"));
  EXPECT_THAT(refusal({"--strategy", "fedsgd"}),
              HasSubstr("--strategy: unknown strategy 'fedsgd'"));
  EXPECT_THAT(
      refusal({"--strategy", "fedadam", "--strategy-options", "{\"server_momentum\": 0.5}"}),
      HasSubstr("'server_momentum' does not apply to strategy \"fedadam\""));
  EXPECT_THAT(refusal({"--strategy-options", "[1]"}),
              HasSubstr("--strategy-options must be a JSON object"));
  EXPECT_THAT(refusal({"--attack", "sign_flip"}),
              HasSubstr("--attack and --attack-fraction go together"));
  EXPECT_THAT(refusal({"--attack", "backdoor", "--attack-fraction", "0.1"}),
              HasSubstr("--attack must be none, label_flip"));
  EXPECT_THAT(
      refusal({"--attack", "little_is_enough", "--attack-fraction", "0.2", "--fraction", "0.5"}),
      HasSubstr("needs every site in every round"));
  EXPECT_THAT(refusal({"--strategy", "fedprox"}), HasSubstr("needs --mu"));
  EXPECT_THAT(refusal({"--mu", "0.1"}), HasSubstr("fedprox only"));
  EXPECT_THAT(refusal({"--lr", "-1"}), HasSubstr("optimizer"));
  EXPECT_THAT(refusal({"--optimizer", "rmsprop"}), HasSubstr("optimizer"));
  EXPECT_THAT(refusal({"--drop-prob", "2"}), HasSubstr("--drop-prob"));
  EXPECT_THAT(refusal({"--slow-factor", "0.5"}), HasSubstr("--slow-factor"));
  EXPECT_THAT(refusal({"--transport", "udp"}), HasSubstr("--transport must be tls or inproc"));
  EXPECT_THAT(refusal({"--model", "resnet"}), HasSubstr("--model"));
  EXPECT_THAT(refusal({"--model", R"({"type":"mlp","hidden":[0]})"}), HasSubstr("--model"));
  EXPECT_THAT(refusal({"--quiet", "--jsonl"}), HasSubstr("exclude each other"));
  EXPECT_THAT(refusal({"--threads", "0"}), HasSubstr("--threads"));
  EXPECT_THAT(refusal({"--target", "1.5"}), HasSubstr("--target"));
}

TEST(SimOptions, ModelNamesBecomeSpecs) {
  SimOptions o;
  o.model = "cnn";
  EXPECT_EQ(model_spec_json(o).value().dump(), R"({"type":"cnn"})");
  o.model = R"({"type":"mlp","hidden":[32]})";
  EXPECT_EQ(model_spec_json(o).value(), nlohmann::json::parse(o.model));
}

TEST(SimOptions, ConfigJsonCarriesEverything) {
  SimOptions o;
  o.partition = "shards:2";
  const auto j = to_json(o);
  EXPECT_EQ(j["partition"], "shards:2");
  EXPECT_EQ(j["model"]["type"], "mlp");
  EXPECT_EQ(j["model"]["hidden"], nlohmann::json::array({256, 128}));
  EXPECT_EQ(j["optimizer"]["kind"], "sgd");
  EXPECT_EQ(j["transport"], "tls");
}

}  // namespace
}  // namespace fedcore::sim
