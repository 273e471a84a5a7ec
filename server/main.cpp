// fedcore-server: the federation's aggregation server and its admin API.
//
//   fedcore-server --config server.json [--run run.json]
//   fedcore-server token create --config server.json --name alice
//   fedcore-server --check-config server.json   (checks the config and what it names, exits)
//
// The config file (JSON) names the listener, the TLS material, the database and the
// admin API (api/config.hpp, docs/config.md); flags override it. It is parsed strictly: an
// unknown key or a value of the wrong type or range stops the server, naming the key. Runs left
// "running" by a previous process resume automatically. --run starts a run from a JSON file
// (federation/run_config.hpp), as POST /api/v1/runs does. `token create` adds an admin
// API token to the config file and prints it, once. --check-config prints a report of
// ok/warn/FAIL lines (server/check_config.hpp) and exits 0 when nothing failed, 1 otherwise,
// starting nothing. --log-format json writes every log line as one JSON object
// (shared/util/log_format.hpp).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <malloc.h>
#include <sstream>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "server/api/api_server.hpp"
#include "server/api/config.hpp"
#include "server/check_config.hpp"
#include "server/federation/federation_server.hpp"
#include "shared/net/listener.hpp"
#include "shared/util/allocator_tuning.hpp"
#include "shared/util/log_format.hpp"

namespace {

using fedcore::federation::ServerOptions;

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The dashboard folder when the config names none: ./web, else web/ beside the binary
// or in ../share/fedcore/web (an installed layout).
std::string default_web_root(const char* argv0) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory("web", ec)) {
    return "web";
  }
  const auto exe = fs::canonical("/proc/self/exe", ec);
  const auto dir = ec ? fs::path(argv0).parent_path() : exe.parent_path();
  for (const auto& candidate : {dir / "web", dir / ".." / "share" / "fedcore" / "web"}) {
    if (fs::is_directory(candidate, ec)) {
      return candidate.string();
    }
  }
  return "web";
}

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  fedcore::keep_large_buffers_warm();  // model-sized buffers: no page faults per round
  CLI::App app{"fedcore-server: the federation's TLS aggregation server"};
  std::string config_path, run_path, database, log_level = "info", log_format = "text";
  std::string check_config_path;
  fedcore::api::ServerConfig config;
  std::string listen, ca, cert, key, crl;
  int port = -1;
  int shutdown_seconds = 10;
  auto* config_option = app.add_option("--config", config_path, "server config file (JSON)");
  auto* run_option = app.add_option("--run", run_path, "start a run from this JSON file");
  app.add_option("--check-config", check_config_path,
                 "check this config file and the files it names, print a report and exit "
                 "(0: nothing failed)")
      ->excludes(config_option, run_option);
  app.add_option("--database", database, "SQLite history file (default fedcore.db)");
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
  app.add_option("--log-format", log_format, "text (default) or json: one JSON object per line")
      ->check(CLI::IsMember({"text", "json"}));
  int api_port = -1;
  std::string web_root;
  bool no_api = false;
  app.add_option("--api-port", api_port, "admin API port (default 8443)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--web-root", web_root, "dashboard folder served by the admin API");
  app.add_flag("--no-api", no_api, "do not start the admin API");

  auto* token = app.add_subcommand("token", "admin API tokens");
  auto* token_create = token->add_subcommand(
      "create", "create a token, store its hash in the config file, print it once");
  std::string token_config, token_name;
  token_create->add_option("--config", token_config, "server config file (JSON)")->required();
  token_create->add_option("--name", token_name, "who the token is for")->required();
  token->require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (auto format = fedcore::parse_log_format(log_format); format) {
    fedcore::install_log_format(*format, {.component = "server", .client = std::nullopt});
  }

  if (!check_config_path.empty()) {
    // A report for people on stdout, not log lines: whatever --log-format says.
    const auto report = fedcore::server::check_server_config(check_config_path);
    std::cout << report.to_text() << std::flush;
    return report.has_failures() ? 1 : 0;
  }

  if (*token_create) {
    auto created = fedcore::api::create_token_in_config(token_config, token_name, unix_ms());
    if (!created) {
      std::cerr << "token create: " << created.error().message << "\n";
      return created.error().code == fedcore::errc::already_exists ? 3 : 2;
    }
    // The only copy: the config keeps its SHA-256.
    std::cout << *created << std::endl;  // flushed before the note on stderr
    std::cerr << "token '" << token_name << "' added to " << token_config
              << "; it is shown only now. Restart the server to use it.\n";
    return 0;
  }

  if (!config_path.empty()) {
    auto text = read_file(config_path);
    if (!text) {
      spdlog::error("cannot read config file '{}'", config_path);
      return 2;
    }
    auto parsed = fedcore::api::parse_server_config_text(*text);
    if (!parsed) {
      spdlog::error("config file '{}': {}", config_path, parsed.error().message);
      return 2;
    }
    config = std::move(*parsed);
  }
  ServerOptions& options = config.federation;
  fedcore::api::ApiConfig& api_config = config.api;
  if (!database.empty())
    config.database = database;
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
  if (api_port >= 0)
    api_config.port = static_cast<std::uint16_t>(api_port);
  if (!web_root.empty())
    api_config.web_root = web_root;
  if (api_config.web_root.empty())
    api_config.web_root = default_web_root(argv[0]);
  if (no_api)
    api_config.enabled = false;

  auto store = fedcore::store::HistoryStore::open(config.database);
  if (!store) {
    spdlog::error("database '{}': {}", config.database, store.error().message);
    return 1;
  }
  // The connection limits, not the default 1,024 descriptors, decide how many peers we hold.
  spdlog::info("open-file limit: {}", fedcore::net::raise_open_file_limit());
  boost::asio::io_context io;
  auto server = fedcore::federation::FederationServer::create(io, options, *store);
  if (!server) {
    spdlog::error("{}", server.error().message);
    return 1;
  }
  auto bound = (*server)->listen();
  if (!bound) {
    spdlog::error("{}", bound.error().message);
    return 1;
  }
  std::unique_ptr<fedcore::api::ApiServer> api;
  if (api_config.enabled) {
    fedcore::api::ApiServerOptions api_options;
    api_options.listen_address = api_config.listen_address;
    api_options.port = api_config.port;
    api_options.web_root = api_config.web_root;
    api_options.cert_file = options.tls.cert_file;
    api_options.key_file = options.tls.key_file;
    api_options.tokens = api_config.tokens;
    api_options.max_connections = api_config.max_connections;
    api_options.max_unauthenticated = api_config.max_unauthenticated;
    api_options.max_unauthenticated_per_address = api_config.max_unauthenticated_per_address;
    api_options.audit_max_rows = api_config.audit_max_rows;
    api_options.max_connections_per_address = api_config.max_connections_per_address;
    api_options.handshake_timeout = api_config.handshake_timeout;
    api_options.request_timeout = api_config.request_timeout;
    api_options.idle_timeout = api_config.idle_timeout;
    api_options.federation_listener = options.listen_address + ":" + std::to_string(*bound);
    auto created = fedcore::api::ApiServer::create(io, api_options, **server, *store);
    if (!created) {
      spdlog::error("{}", created.error().message);
      return 1;
    }
    api = std::move(*created);
    auto api_bound = api->listen();
    if (!api_bound) {
      spdlog::error("{}", api_bound.error().message);
      return 1;
    }
    spdlog::info("dashboard: https://{}:{}/",
                 api_config.listen_address == "0.0.0.0" ? std::string("localhost")
                                                        : api_config.listen_address,
                 *api_bound);
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
    auto run_config = fedcore::federation::parse_run_config(*text);
    if (!run_config) {
      spdlog::error("run file '{}': {}", run_path, run_config.error().message);
      return 2;
    }
    auto run = (*server)->start_run(*run_config);
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
      if (api) {
        api->shutdown();
      }
      (*server)->shutdown();
    }
  });
  // SIGHUP: re-read the CRL now (the file watcher would within crl_poll_interval).
  boost::asio::signal_set hangups(io, SIGHUP);
  std::function<void(const boost::system::error_code&, int)> on_hangup =
      [&](const boost::system::error_code& ec, int) {
        if (ec || stopping) {
          return;
        }
        if (auto closed = (*server)->reload_revocations(); !closed) {
          spdlog::error("SIGHUP: the CRL cannot be loaded (the previous list stays): {}",
                        closed.error().message);
        }
        hangups.async_wait(on_hangup);
      };
  hangups.async_wait(on_hangup);
  // glibc keeps what connections that came and went freed: after each of three storms of
  // handshakes the server stayed at 77, 108, then 128 MB resident, 21 MB after a trim
  // (docs/results.md, "Connection storms"). Give it back every 5 s.
  boost::asio::steady_timer trim_timer(io);
  std::function<void(const boost::system::error_code&)> trim =
      [&](const boost::system::error_code& ec) {
        if (ec || stopping) {
          return;
        }
        malloc_trim(0);
        trim_timer.expires_after(std::chrono::seconds(5));
        trim_timer.async_wait(trim);
      };
  trim_timer.expires_after(std::chrono::seconds(5));
  trim_timer.async_wait(trim);
  while (!stopping && io.run_one() > 0) {
  }
  hangups.cancel();
  trim_timer.cancel();
  // Wind down within the bound; whatever is still pending after it is abandoned.
  io.run_for(std::chrono::seconds(shutdown_seconds));
  spdlog::info("stopped");
  return 0;
}
