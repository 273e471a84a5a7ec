// The server config file (issue 19): every key read strictly, each problem named by its key
// path; and the examples the README gives for a federation by hand still parse.
#include "server/api/config.hpp"

#include <fstream>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/federation/run_config.hpp"
#include "shared/util/source_tree.hpp"

namespace fedcore::api {
namespace {

// The text of the heredoc `cat > <name> <<'JSON'` in the README.
std::string readme_example(const std::string& name) {
  std::ifstream in(fedcore::source_path("README.md"));
  std::stringstream text;
  text << in.rdbuf();
  const auto all = text.str();
  const std::string opening = "cat > " + name + " <<'JSON'\n";
  const auto begin = all.find(opening);
  if (begin == std::string::npos) {
    ADD_FAILURE() << "README.md has no example " << name;
    return {};
  }
  const auto start = begin + opening.size();
  return all.substr(start, all.find("\nJSON\n", start) - start);
}

TEST(ServerConfig, ReadsEveryKey) {
  auto c = parse_server_config_text(R"({"listen": "0.0.0.0", "port": 7500, "database": "h.db",
      "checkpoint_dir": "ck", "max_connections": 64, "heartbeat_seconds": 2, "idle_timeout_s": 30,
      "handshake_timeout_s": 3, "hello_timeout_s": 4, "upload_memory_mb": 96,
      "storage_probe_first_s": 5, "storage_probe_max_s": 300, "overlap_checkpoints": false,
      "keep_checkpoints": 3, "worker_threads": 3, "tls": {"ca": "ca.pem", "cert": "s.pem", "key": "s.key", "crl": "crl.pem"},
      "api": {"port": 0, "enabled": false, "handshake_timeout_s": 5, "request_timeout_s": 6,
              "idle_timeout_s": 7, "max_unauthenticated": 40,
              "max_unauthenticated_per_address": 4, "max_connections_per_address": 8,
              "audit_max_rows": 5000}})");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->federation.listen_address, "0.0.0.0");
  EXPECT_EQ(c->federation.port, 7500);
  EXPECT_EQ(c->database, "h.db");
  EXPECT_EQ(c->federation.checkpoint_dir, "ck");
  EXPECT_EQ(c->federation.max_connections, 64u);
  EXPECT_EQ(c->federation.heartbeat_seconds, 2u);
  EXPECT_EQ(c->federation.channel.idle_timeout, std::chrono::seconds(30));
  EXPECT_EQ(c->federation.handshake_timeout, std::chrono::seconds(3));
  EXPECT_EQ(c->federation.hello_timeout, std::chrono::seconds(4));
  EXPECT_EQ(c->api.handshake_timeout, std::chrono::seconds(5));
  EXPECT_EQ(c->api.request_timeout, std::chrono::seconds(6));
  EXPECT_EQ(c->api.idle_timeout, std::chrono::seconds(7));
  EXPECT_EQ(c->federation.upload_memory_bytes, std::uint64_t{96} << 20);
  EXPECT_EQ(c->federation.storage_retry.first_probe, std::chrono::seconds(5));
  EXPECT_EQ(c->federation.storage_retry.max_interval, std::chrono::seconds(300));
  EXPECT_FALSE(c->federation.overlap_checkpoints);
  EXPECT_EQ(c->federation.keep_checkpoints, 3);
  EXPECT_EQ(c->federation.worker_threads, 3);
  EXPECT_EQ(c->api.max_unauthenticated, 40u);
  EXPECT_EQ(c->api.max_unauthenticated_per_address, 4u);
  EXPECT_EQ(c->api.max_connections_per_address, 8u);
  EXPECT_EQ(c->api.audit_max_rows, 5000);
  EXPECT_EQ(c->federation.tls.crl_file, "crl.pem");
  EXPECT_EQ(c->api.port, 0);
  EXPECT_FALSE(c->api.enabled);
  // Absent keys keep the defaults.
  auto empty = parse_server_config_text("{}");
  ASSERT_TRUE(empty) << empty.error().message;
  EXPECT_EQ(empty->federation.port, 7443);
  EXPECT_EQ(empty->database, "fedcore.db");
  EXPECT_EQ(empty->api.port, 8443);
  EXPECT_EQ(empty->federation.handshake_timeout, std::chrono::seconds(10));
  EXPECT_EQ(empty->api.request_timeout, std::chrono::seconds(10));
  EXPECT_TRUE(empty->federation.overlap_checkpoints);
  EXPECT_EQ(empty->federation.keep_checkpoints, 0) << "every round's file, unless asked";
  EXPECT_EQ(empty->federation.worker_threads, federation::ServerOptions::kAutoWorkerThreads);
}

TEST(ServerConfig, EveryProblemNamesItsKeyPath) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"databse": "x.db"})", "server config: unknown key 'databse'; did you mean 'database'?"},
      {R"({"tls": {"ca": "a", "cert": "b", "key": "c", "clr": "d"}})",
       "server config: unknown key 'tls.clr'; did you mean 'tls.crl'?"},
      {R"({"api": {"web-root": "w"}})",
       "server config: unknown key 'api.web-root'; did you mean 'api.web_root'?"},
      {R"({"colour": 1})",
       "server config: unknown key 'colour' (known keys: listen, port, database, checkpoint_dir, "
       "max_connections, max_unauthenticated, max_unauthenticated_per_address, "
       "max_inflight_updates, upload_memory_mb, crl_poll_s, heartbeat_seconds, idle_timeout_s, "
       "handshake_timeout_s, hello_timeout_s, storage_probe_first_s, storage_probe_max_s, "
       "overlap_checkpoints, keep_checkpoints, worker_threads, tls, api)"},
      {R"({"keep_checkpoints": -1})",
       "server config: 'keep_checkpoints' must be an integer in [0, 1000000], got -1"},
      {R"({"storage_probe_first_s": 90, "storage_probe_max_s": 60})",
       "server config: 'storage_probe_first_s' (90) must not exceed 'storage_probe_max_s' (60)"},
      {R"({"upload_memory_mb": -1})",
       "server config: 'upload_memory_mb' must be an integer in [0, 1048576], got -1"},
      {R"({"hello_timeout_s": 0})",
       "server config: 'hello_timeout_s' must be an integer in [1, 3600], got 0"},
      {R"({"api": {"request_timeout_s": 3601}})",
       "server config: 'api.request_timeout_s' must be an integer in [1, 3600], got 3601"},
      {R"({"port": "7443"})",
       "server config: 'port' must be an integer in [0, 65535], got \"7443\""},
      {R"({"port": 70000})", "server config: 'port' must be an integer in [0, 65535], got 70000"},
      {R"({"port": -1})", "server config: 'port' must be an integer in [0, 65535], got -1"},
      {R"({"port": 18446744073709551617})",
       "server config: 'port' must be an integer in [0, 65535], got 1.8446744073709552e+19"},
      {R"({"max_connections": 4294967296})",
       "server config: 'max_connections' must be an integer in [1, 1000000], got 4294967296"},
      {R"({"heartbeat_seconds": 0.5})",
       "server config: 'heartbeat_seconds' must be an integer in [1, 3600], got 0.5"},
      {R"({"database": ""})", "server config: 'database' must not be empty"},
      {R"({"database": ["a.db"]})", "server config: 'database' must be a string, got an array"},
      {R"({"tls": "certs/"})", "server config: 'tls' must be a JSON object, got \"certs/\""},
      {R"({"tls": {"ca": "a", "cert": "b", "key": "c"}})",
       "server config: 'tls.crl' is required (a PEM file)"},
      {R"({"heartbeat_seconds": 60})",
       "server config: 'idle_timeout_s' (120) must exceed 3 heartbeats (3 x 'heartbeat_seconds' "
       "= 180)"},
      {R"({"api": {"port": 1.5}})",
       "server config: 'api.port' must be an integer in [0, 65535], got 1.5"},
      {R"({"port": 1, "port": 2})", "server config: duplicate key 'port'"},
      {R"({"port": 1e999})", "server config: invalid JSON: a number is too large for a double"},
      {R"([])", "server config: must be a JSON object, got an array"},
      {"", "server config: invalid JSON at byte 1"},
  };
  for (const auto& [text, message] : cases) {
    auto c = parse_server_config_text(text);
    ASSERT_FALSE(c) << text;
    EXPECT_EQ(c.error().code, errc::invalid_argument) << text;
    EXPECT_EQ(c.error().message, message) << text;
  }
  // What a program builds can hold what JSON text cannot.
  auto inf = parse_server_config(
      nlohmann::json{{"idle_timeout_s", std::numeric_limits<double>::infinity()}});
  ASSERT_FALSE(inf);
  EXPECT_EQ(inf.error().message,
            "server config: 'idle_timeout_s' must be an integer in [1, 86400], got inf");
}

TEST(ServerConfig, TheReadmeExamplesParse) {
  auto server = parse_server_config_text(readme_example("server.json"));
  ASSERT_TRUE(server) << server.error().message;
  EXPECT_EQ(server->federation.tls.crl_file, "certs/dev/crl.pem");
  auto run = federation::parse_run_config(readme_example("run.json"));
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_EQ(run->rounds, 5);
}

}  // namespace
}  // namespace fedcore::api
