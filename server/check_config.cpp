#include "server/check_config.hpp"

#include <filesystem>
#include <unistd.h>

#include "server/api/config.hpp"
#include "shared/tls/context.hpp"

namespace fedcore::server {
namespace {

namespace fs = std::filesystem;

std::string quoted(const std::string& path) {
  return "'" + path + "'";
}

// The folder a path lives in, "." for a bare file name.
fs::path folder_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

bool writable_folder(const fs::path& folder) {
  std::error_code ec;
  return fs::is_directory(folder, ec) && ::access(folder.c_str(), W_OK | X_OK) == 0;
}

void check_database(const std::string& path, tls::CheckReport& report) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  const fs::path folder = folder_of(path);
  if (!writable_folder(folder)) {
    report.fail("database", "the folder " + quoted(folder.string()) + " of " + quoted(path) +
                                " is missing or not writable (SQLite writes its journal there)");
    return;
  }
  if (!fs::exists(status)) {
    report.ok("database", quoted(path) + " will be created (the folder is writable)");
    return;
  }
  if (!fs::is_regular_file(status)) {
    report.fail("database", quoted(path) + " is not a regular file");
    return;
  }
  if (::access(path.c_str(), R_OK | W_OK) != 0) {
    report.fail("database", quoted(path) + " is not readable and writable by this user");
    return;
  }
  report.ok("database", quoted(path) + " exists, readable and writable");
}

// The server creates the folder when it first writes a checkpoint; what must hold now is
// that it could: the folder is writable, or its nearest existing ancestor is.
void check_checkpoint_dir(const std::string& path, tls::CheckReport& report) {
  std::error_code ec;
  if (fs::exists(path, ec)) {
    if (writable_folder(path)) {
      report.ok("checkpoint_dir", quoted(path) + " is a writable folder");
    } else {
      report.fail("checkpoint_dir", quoted(path) + " is not a writable folder");
    }
    return;
  }
  fs::path ancestor = fs::absolute(path, ec).parent_path();
  while (!ancestor.empty() && !fs::exists(ancestor, ec) && ancestor != ancestor.root_path()) {
    ancestor = ancestor.parent_path();
  }
  if (writable_folder(ancestor)) {
    report.ok("checkpoint_dir",
              quoted(path) + " will be created (in " + quoted(ancestor.string()) + ", writable)");
  } else {
    report.fail("checkpoint_dir", quoted(path) + " does not exist and cannot be created: " +
                                      quoted(ancestor.string()) + " is not writable");
  }
}

bool same_listener(const std::string& a, const std::string& b) {
  return a == b || a == "0.0.0.0" || b == "0.0.0.0" || a == "::" || b == "::";
}

void check_listeners(const api::ServerConfig& config, tls::CheckReport& report) {
  const auto& federation = config.federation;
  const std::string where = federation.listen_address + ":" + std::to_string(federation.port);
  if (config.api.enabled && federation.port != 0 && config.api.port == federation.port &&
      same_listener(federation.listen_address, config.api.listen_address)) {
    report.fail("listen", "the federation listener and the admin API both claim port " +
                              std::to_string(federation.port));
    return;
  }
  report.ok("listen", "federation on " + where +
                          (config.api.enabled ? ", admin API on " + config.api.listen_address +
                                                    ":" + std::to_string(config.api.port)
                                              : ", admin API off") +
                          " (not opened by this check)");
}

void check_api(const api::ApiConfig& api, tls::CheckReport& report) {
  if (!api.enabled) {
    report.ok("api", "disabled");
    return;
  }
  std::error_code ec;
  if (!api.web_root.empty() && !fs::is_directory(api.web_root, ec)) {
    report.warn("api", "web_root " + quoted(api.web_root) +
                           " is not a folder: the dashboard will not be served");
  }
  if (api.tokens.empty()) {
    report.warn("api",
                "no admin token: every call that needs one is refused; create one with "
                "'fedcore-server token create --config FILE --name NAME'");
  } else {
    report.ok("api", std::to_string(api.tokens.size()) + " admin token(s)");
  }
}

}  // namespace

tls::CheckReport check_server_config(const std::string& path, const tls::CheckOptions& options) {
  tls::CheckReport report;
  const auto text = tls::read_config_file(path, report);
  if (!text) {
    return report;
  }
  auto config = api::parse_server_config_text(*text);
  if (!config) {
    report.fail("config", quoted(path) + ": " + config.error().message);
    return report;
  }
  report.ok("config", quoted(path) + " parses strictly");

  const tls::ServerTlsConfig& tls_config = config->federation.tls;
  tls::check_tls_files({.ca = tls_config.ca_file,
                        .cert = tls_config.cert_file,
                        .key = tls_config.key_file,
                        .crl = tls_config.crl_file,
                        .role = tls::CertificateRole::server,
                        .crl_required = tls_config.require_client_cert},
                       options, report);
  // What the server itself would build at start; after the file checks, so that its error
  // is only reported when they found nothing more specific.
  if (!report.has_failures("tls.")) {
    auto context = tls::make_server_context(tls_config);
    if (context) {
      report.ok("tls context", "the server's TLS context builds as at start");
    } else {
      report.fail("tls context", context.error().message);
    }
  }
  check_database(config->database, report);
  check_checkpoint_dir(config->federation.checkpoint_dir, report);
  check_listeners(*config, report);
  check_api(config->api, report);
  return report;
}

}  // namespace fedcore::server
