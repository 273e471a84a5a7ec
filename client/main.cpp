// fedcore-client: the hospital daemon.
//
//   fedcore-client --config client.json
//   fedcore-client --verify-audit /var/lib/fedcore/audit.jsonl   (checks the chain, exits)
//
// client.json:
//   {"server": "fl.example.org", "port": 7443, "server_name": "fl.example.org",
//    "tls": {"ca": "ca.pem", "cert": "hospital-3.pem", "key": "hospital-3.key"},
//    "data": {"format": "csv", "path": "/srv/data/cohort.csv", "label_column": "benign",
//             "test_fraction": 0.2},
//    "threads": 2,
//    "audit_log": "/var/lib/fedcore/audit.jsonl",         (optional: client/audit_log.hpp)
//    "policy": {"allowed_model_types": ["logreg"], "max_local_epochs": 5,
//               "max_epsilon": 8, "server": {"common_name": "fl.example.org"}}}
//                                                         (optional: client/site_policy.hpp)
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "client/audit_log.hpp"
#include "client/daemon.hpp"
#include "client/site_policy.hpp"

namespace {

std::string apply_config(const nlohmann::json& j, fedcore::client::ClientOptions& o) {
  if (!j.is_object()) {
    return "the config must be a JSON object";
  }
  try {
    if (j.contains("server"))
      o.host = j["server"].get<std::string>();
    if (j.contains("port"))
      o.port = j["port"].get<std::uint16_t>();
    o.tls.server_name = j.value("server_name", o.host);
    if (j.contains("threads"))
      o.threads = j["threads"].get<int>();
    if (j.contains("tls")) {
      const auto& t = j["tls"];
      o.tls.ca_file = t.at("ca").get<std::string>();
      o.tls.cert_file = t.at("cert").get<std::string>();
      o.tls.key_file = t.at("key").get<std::string>();
    }
    if (j.contains("data")) {
      const auto& d = j["data"];
      o.data.format = d.value("format", o.data.format);
      o.data.path = d.value("path", o.data.path);
      o.data.label_column = d.value("label_column", o.data.label_column);
      o.data.partition = d.value("partition", o.data.partition);
      o.data.partition_clients = d.value("partition_clients", o.data.partition_clients);
      o.data.partition_index = d.value("partition_index", o.data.partition_index);
      o.data.partition_seed = d.value("partition_seed", o.data.partition_seed);
      o.data.test_fraction = d.value("test_fraction", o.data.test_fraction);
      o.data.split_seed = d.value("split_seed", o.data.split_seed);
    }
    if (j.contains("audit_log"))
      o.audit_log = j["audit_log"].get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return std::string("bad config value: ") + e.what();
  }
  if (j.contains("policy")) {
    auto policy = fedcore::client::parse_site_policy(j["policy"]);
    if (!policy) {
      return policy.error().message;
    }
    o.policy = std::move(*policy);
  }
  return {};
}

int verify_audit(const std::string& path) {
  auto summary = fedcore::client::verify_audit_log(path);
  if (!summary) {
    spdlog::error("{}", summary.error().message);
    return 1;
  }
  spdlog::info("audit log '{}': {} line(s), chain intact; head {}", path, summary->lines,
               summary->head);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedcore-client: trains on local data and sends model updates, never data"};
  std::string config_path, log_level = "info", audit_path;
  auto* config_option = app.add_option("--config", config_path, "client config file (JSON)");
  app.add_option("--verify-audit", audit_path, "check an audit log's hash chain and exit")
      ->excludes(config_option);
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (!audit_path.empty()) {
    return verify_audit(audit_path);
  }
  if (config_path.empty()) {
    spdlog::error("--config is required");
    return 2;
  }

  std::ifstream in(config_path);
  if (!in) {
    spdlog::error("cannot read config file '{}'", config_path);
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  fedcore::client::ClientOptions options;
  if (j.is_discarded()) {
    spdlog::error("config file '{}' is not valid JSON", config_path);
    return 2;
  }
  if (auto problem = apply_config(j, options); !problem.empty()) {
    spdlog::error("config file '{}': {}", config_path, problem);
    return 2;
  }
  boost::asio::io_context io;
  auto daemon = fedcore::client::ClientDaemon::create(io, options);
  if (!daemon) {
    spdlog::error("{}", daemon.error().message);
    return 1;
  }
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (!ec) {
      spdlog::info("signal {}: stopping", signal);
      (*daemon)->stop();
    }
  });
  boost::asio::co_spawn(io, (*daemon)->run(), [&](std::exception_ptr) { signals.cancel(); });
  io.run();
  spdlog::info("stopped after {} round(s)", (*daemon)->rounds_trained());
  return 0;
}
