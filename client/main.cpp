// fedcore-client: the hospital daemon.
//
//   fedcore-client --config client.json
//   fedcore-client --verify-audit /var/lib/fedcore/audit.jsonl   (checks the chain, exits)
//   fedcore-client --check-config client.json   (checks the config and what it names, exits
//                                                0 when nothing failed: client/check_config.hpp)
//   --log-format json: every log line one JSON object (shared/util/log_format.hpp), its
//   `client` field this site's id (the certificate's CN) unless the line names another.
//
// client.json (every key: client/client_config.hpp and docs/config.md; parsed strictly, so
// an unknown key or a value out of range stops the daemon at start, naming the key):
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
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <spdlog/spdlog.h>

#include "client/audit_log.hpp"
#include "client/check_config.hpp"
#include "client/client_config.hpp"
#include "client/daemon.hpp"
#include "shared/tls/check_config.hpp"
#include "shared/util/allocator_tuning.hpp"
#include "shared/util/client_id.hpp"
#include "shared/util/log_format.hpp"

namespace {

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
  fedcore::keep_large_buffers_warm();  // model-sized buffers: no page faults per round
  CLI::App app{"fedcore-client: trains on local data and sends model updates, never data"};
  std::string config_path, log_level = "info", log_format = "text", audit_path, check_path;
  auto* config_option = app.add_option("--config", config_path, "client config file (JSON)");
  auto* audit_option =
      app.add_option("--verify-audit", audit_path, "check an audit log's hash chain and exit")
          ->excludes(config_option);
  app.add_option("--check-config", check_path,
                 "check this config file, its certificates and data, print a report and exit "
                 "(0: nothing failed)")
      ->excludes(config_option, audit_option);
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  app.add_option("--log-format", log_format, "text (default) or json: one JSON object per line")
      ->check(CLI::IsMember({"text", "json"}));
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  const auto parsed_format = fedcore::parse_log_format(log_format);  // CLI11 checked it
  const auto format = parsed_format ? *parsed_format : fedcore::LogFormat::text;
  fedcore::install_log_format(format, {.component = "client", .client = std::nullopt});
  if (!check_path.empty()) {
    // A report for people on stdout, not log lines: whatever --log-format says.
    const auto report = fedcore::client::check_client_config(check_path);
    std::cout << report.to_text() << std::flush;
    return report.has_failures() ? 1 : 0;
  }
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
  auto options = fedcore::client::parse_client_config_text(text.str());
  if (!options) {
    spdlog::error("config file '{}': {}", config_path, options.error().message);
    return 2;
  }
  // Every line of this daemon is about this site: its id (the certificate's CN, which the
  // server knows it by) goes into the `client` field of lines that name no other client.
  if (auto id = fedcore::tls::certificate_common_name(options->tls.cert_file);
      id && fedcore::is_valid_client_id(*id)) {
    fedcore::install_log_format(format, {.component = "client", .client = *id});
  }
  boost::asio::io_context io;
  auto daemon = fedcore::client::ClientDaemon::create(io, std::move(*options));
  if (!daemon) {
    spdlog::error("{}", daemon.error().message);
    return 1;
  }
  fedcore::client::run_until_signalled(io, **daemon);
  spdlog::info("stopped after {} round(s)", (*daemon)->rounds_trained());
  return 0;
}
