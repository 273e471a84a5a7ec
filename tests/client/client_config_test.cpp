// The client daemon's config file (issue 19): every key read strictly, each problem named
// by its key path; and the README's example still parses.
#include "client/client_config.hpp"

#include <fstream>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shared/util/source_tree.hpp"

namespace fedcore::client {
namespace {

const std::string kTls = R"("tls": {"ca": "ca.pem", "cert": "c.pem", "key": "c.key"})";

std::string config(const std::string& data, const std::string& extra = "") {
  return "{" + kTls + R"(, "data": )" + data + extra + "}";
}

TEST(ClientConfig, ReadsEveryKey) {
  auto c = parse_client_config_text(R"({"server": "fl.example.org", "port": 7500,
      "server_name": "fl", "threads": 2, "audit_log": "/var/audit.jsonl",
      "site_state": "/var/lib/fedcore/site",
      "tls": {"ca": "ca.pem", "cert": "c.pem", "key": "c.key"},
      "data": {"format": "csv", "path": "d.csv", "label_column": "y", "test_fraction": 0.25,
               "split_seed": 7, "partition": "dirichlet:0.5", "partition_clients": 4,
               "partition_index": 3, "partition_seed": 9},
      "policy": {"max_local_epochs": 2}})");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->host, "fl.example.org");
  EXPECT_EQ(c->port, 7500);
  EXPECT_EQ(c->tls.server_name, "fl");
  EXPECT_EQ(c->tls.key_file, "c.key");
  EXPECT_EQ(c->threads, 2);
  EXPECT_EQ(c->audit_log, "/var/audit.jsonl");
  EXPECT_EQ(c->site_state, "/var/lib/fedcore/site");
  EXPECT_EQ(c->data.label_column, "y");
  EXPECT_DOUBLE_EQ(c->data.test_fraction, 0.25);
  EXPECT_EQ(c->data.split_seed, 7u);
  EXPECT_EQ(c->data.partition, "dirichlet:0.5");
  EXPECT_EQ(c->data.partition_clients, 4u);
  EXPECT_EQ(c->data.partition_index, 3u);
  EXPECT_EQ(c->data.partition_seed, 9u);
  EXPECT_EQ(c->policy.max_local_epochs, 2);
  // The server name defaults to the host.
  auto named = parse_client_config_text(R"({"server": "10.0.0.5", )" + kTls +
                                        R"(, "data": {"format": "fashion-mnist"}})");
  ASSERT_TRUE(named) << named.error().message;
  EXPECT_EQ(named->tls.server_name, "10.0.0.5");
}

TEST(ClientConfig, EveryProblemNamesItsKeyPath) {
  const std::string csv = R"({"format": "csv", "path": "d.csv")";
  const std::pair<std::string, std::string> cases[] = {
      {config(csv + R"(, "lable_column": "y"})"),
       "client config: unknown key 'data.lable_column'; did you mean 'data.label_column'?"},
      {config(csv + "}", R"(, "sever": "x")"),
       "client config: unknown key 'sever'; did you mean 'server'?"},
      {config(csv + "}", R"(, "policy": {"max_epsilion": 8})"),
       "client config: unknown key 'policy.max_epsilion'; did you mean 'policy.max_epsilon'?"},
      {config(csv + "}", R"(, "port": "7443")"),
       "client config: 'port' must be an integer in [1, 65535], got \"7443\""},
      {config(csv + "}", R"(, "port": 0)"),
       "client config: 'port' must be an integer in [1, 65535], got 0"},
      {config(csv + "}", R"(, "port": 70000)"),
       "client config: 'port' must be an integer in [1, 65535], got 70000"},
      {config(csv + "}", R"(, "threads": 4294967297)"),
       "client config: 'threads' must be an integer in [0, 1024], got 4294967297"},
      {config(csv + "}", R"(, "threads": -1)"),
       "client config: 'threads' must be an integer in [0, 1024], got -1"},
      {config(csv + R"(, "test_fraction": 1.5})"),
       "client config: 'data.test_fraction' must be a number in [0, 1), got 1.5"},
      {config(csv + R"(, "split_seed": 18446744073709551616})"),
       "client config: 'data.split_seed' must be an integer in [0, 9223372036854775807], got "
       "1.8446744073709552e+19"},
      {config(R"({"format": "parquet", "path": "d"})"),
       "client config: 'data.format' must be one of \"csv\", \"fashion-mnist\", \"cifar10\", got "
       "\"parquet\""},
      {config(R"({"format": "csv"})"), "client config: 'data.path' is required for format \"csv\""},
      {config(R"({"format": "fashion-mnist", "label_column": "y"})"),
       "client config: 'data.label_column' applies only to format \"csv\""},
      {config(csv + R"(, "partition_index": 2})"),
       "client config: 'data.partition_index' applies only with 'partition'"},
      {config(csv + R"(, "partition": "dirichlet:-1"})"),
       "client config: 'data.partition' is not a partition: partition spec 'dirichlet:-1': "
       "alpha must be a finite number > 0"},
      {config(csv + R"(, "partition": "iid", "partition_clients": 2, "partition_index": 2})"),
       "client config: 'data.partition_index' must be below 'partition_clients' (2), got 2"},
      {config(csv + R"(, "partition": "iid", "partition_clients": 100000})"),
       "client config: 'data.partition_clients' must be an integer in [1, 10000], got 100000"},
      {"{" + kTls + "}", "client config: 'data' is required"},
      {R"({"data": {"format": "fashion-mnist"}})", "client config: 'tls' is required"},
      {R"({"data": {"format": "fashion-mnist"}, "tls": {"ca": "a", "cert": "b"}})",
       "client config: 'tls.key' is required (a PEM file)"},
      {config(csv + "}", R"(, "port": 1, "port": 2)"), "client config: duplicate key 'port'"},
      {"{\"server\": \"\xc3\"}", "client config: invalid JSON at byte 14"},
      {"[]", "client config: must be a JSON object, got an array"},
  };
  for (const auto& [text, message] : cases) {
    auto c = parse_client_config_text(text);
    ASSERT_FALSE(c) << text;
    EXPECT_EQ(c.error().code, errc::invalid_argument) << text;
    EXPECT_EQ(c.error().message, message) << text;
  }
  auto j = nlohmann::json::parse(config(csv + "}"));
  j["data"]["test_fraction"] = std::numeric_limits<double>::quiet_NaN();
  auto nan = parse_client_config(j);
  ASSERT_FALSE(nan);
  EXPECT_EQ(nan.error().message,
            "client config: 'data.test_fraction' must be a number in [0, 1), got nan");
}

TEST(ClientConfig, ASiteWithItsOwnTrainerNamesNoData) {
  const std::string without = "{" + kTls + "}";
  EXPECT_TRUE(parse_client_config_text(without, DataSection::forbidden));
  const auto required = parse_client_config_text(without);
  ASSERT_FALSE(required);
  EXPECT_EQ(required.error().message, "client config: 'data' is required");
  const auto named =
      parse_client_config_text(config(R"({"format": "fashion-mnist"})"), DataSection::forbidden);
  ASSERT_FALSE(named);
  EXPECT_NE(named.error().message.find("'data' names data for fedcore-client"), std::string::npos)
      << named.error().message;
}

TEST(ClientConfig, TheReadmeExampleParses) {
  std::ifstream in(fedcore::source_path("README.md"));
  std::stringstream text;
  text << in.rdbuf();
  const auto all = text.str();
  const std::string opening = "cat > hospital-1.json <<'JSON'\n";
  const auto begin = all.find(opening);
  ASSERT_NE(begin, std::string::npos);
  const auto start = begin + opening.size();
  auto c = parse_client_config_text(all.substr(start, all.find("\nJSON\n", start) - start));
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->data.label_column, "benign");
}

}  // namespace
}  // namespace fedcore::client
