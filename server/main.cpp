// fedcore-server: the federation's aggregation server.
//
//   fedcore-server --config server.json [--run run.json]
//
// The config file (JSON) names the listener, the TLS material and the database; flags
// override it. Runs left "running" by a previous process resume automatically. Until
// the admin API lands, --run starts a run from a JSON file (federation/run_config.hpp).
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "federation/federation_server.hpp"

namespace {

using fedcore::server::ServerOptions;

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Applies the config file's keys to the options; returns the problem, if any.
std::string apply_config(const nlohmann::json& j, ServerOptions& o, std::string& database) {
  if (!j.is_object()) {
    return "the config must be a JSON object";
  }
  try {
    if (j.contains("listen"))
      o.listen_address = j["listen"].get<std::string>();
    if (j.contains("port"))
      o.port = j["port"].get<std::uint16_t>();
    if (j.contains("database"))
      database = j["database"].get<std::string>();
    if (j.contains("checkpoint_dir"))
      o.checkpoint_dir = j["checkpoint_dir"].get<std::string>();
    if (j.contains("max_connections"))
      o.max_connections = j["max_connections"].get<std::size_t>();
    if (j.contains("heartbeat_seconds"))
      o.heartbeat_seconds = j["heartbeat_seconds"].get<std::uint32_t>();
    if (j.contains("idle_timeout_s"))
      o.channel.idle_timeout = std::chrono::seconds(j["idle_timeout_s"].get<int>());
    if (j.contains("tls")) {
      const auto& t = j["tls"];
      o.tls.ca_file = t.at("ca").get<std::string>();
      o.tls.cert_file = t.at("cert").get<std::string>();
      o.tls.key_file = t.at("key").get<std::string>();
      o.tls.crl_file = t.at("crl").get<std::string>();
    }
  } catch (const nlohmann::json::exception& e) {
    return std::string("bad config value: ") + e.what();
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedcore-server: the federation's TLS aggregation server"};
  std::string config_path, run_path, database = "fedcore.db", log_level = "info";
  ServerOptions options;
  options.port = 7443;
  std::string listen, ca, cert, key, crl;
  int port = -1;
  int shutdown_seconds = 10;
  app.add_option("--config", config_path, "server config file (JSON)");
  app.add_option("--run", run_path, "start a run from this JSON file");
  app.add_option("--database", database, "SQLite history file");
  app.add_option("--listen", listen, "listen address (default 127.0.0.1)");
  app.add_option("--port", port, "federation port (default 7443)")->check(CLI::Range(0, 65535));
  app.add_option("--ca", ca, "federation CA certificate");
  app.add_option("--cert", cert, "server certificate");
  app.add_option("--key", key, "server private key");
  app.add_option("--crl", crl, "certificate revocation list");
  app.add_option("--shutdown-timeout", shutdown_seconds,
                 "seconds to wind down after SIGINT/SIGTERM")
      ->check(CLI::Range(1, 600));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));

  if (!config_path.empty()) {
    auto text = read_file(config_path);
    if (!text) {
      spdlog::error("cannot read config file '{}'", config_path);
      return 2;
    }
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_discarded()) {
      spdlog::error("config file '{}' is not valid JSON", config_path);
      return 2;
    }
    if (auto problem = apply_config(j, options, database); !problem.empty()) {
      spdlog::error("config file '{}': {}", config_path, problem);
      return 2;
    }
  }
  if (!listen.empty())
    options.listen_address = listen;
  if (port >= 0)
    options.port = static_cast<std::uint16_t>(port);
  if (!ca.empty())
    options.tls.ca_file = ca;
  if (!cert.empty())
    options.tls.cert_file = cert;
  if (!key.empty())
    options.tls.key_file = key;
  if (!crl.empty())
    options.tls.crl_file = crl;

  auto store = fedcore::store::HistoryStore::open(database);
  if (!store) {
    spdlog::error("database '{}': {}", database, store.error().message);
    return 1;
  }
  boost::asio::io_context io;
  auto server = fedcore::server::FederationServer::create(io, options, *store);
  if (!server) {
    spdlog::error("{}", server.error().message);
    return 1;
  }
  auto bound = (*server)->listen();
  if (!bound) {
    spdlog::error("{}", bound.error().message);
    return 1;
  }
  if (auto resumed = (*server)->resume_runs(); !resumed) {
    spdlog::error("resuming runs: {}", resumed.error().message);
  }
  if (!run_path.empty()) {
    auto text = read_file(run_path);
    if (!text) {
      spdlog::error("cannot read run file '{}'", run_path);
      return 2;
    }
    auto config = fedcore::server::parse_run_config(*text);
    if (!config) {
      spdlog::error("run file '{}': {}", run_path, config.error().message);
      return 2;
    }
    auto run = (*server)->start_run(*config);
    if (!run) {
      spdlog::error("cannot start run: {}", run.error().message);
    }
  }
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  bool stopping = false;
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (!ec) {
      spdlog::info("signal {}: stopping (at most {} s)", signal, shutdown_seconds);
      stopping = true;
      (*server)->shutdown();
    }
  });
  while (!stopping && io.run_one() > 0) {
  }
  // Wind down within the bound; whatever is still pending after it is abandoned.
  io.run_for(std::chrono::seconds(shutdown_seconds));
  spdlog::info("stopped");
  return 0;
}
