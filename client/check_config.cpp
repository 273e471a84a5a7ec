#include "client/check_config.hpp"

#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "client/audit_log.hpp"
#include "client/client_config.hpp"
#include "client/data_source.hpp"
#include "client/dp_ledger.hpp"
#include "client/site_batch_norm.hpp"
#include "shared/tls/context.hpp"
#include "shared/util/client_id.hpp"

namespace fedcore::client {
namespace {

namespace fs = std::filesystem;

std::string quoted(const std::string& path) {
  return "'" + path + "'";
}

// A number without trailing zeros ("8", "0.5").
std::string number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

void check_identity(const std::string& cert_file, tls::CheckReport& report) {
  auto cn = tls::certificate_common_name(cert_file);
  if (!cn) {
    report.fail("tls.cert id", cn.error().message);
  } else if (!is_valid_client_id(*cn)) {
    report.fail("tls.cert id", "the certificate's CN '" + cn->substr(0, 80) +
                                   "' is not a client id (1-64 of A-Z a-z 0-9 . _ -)");
  } else {
    report.ok("tls.cert id", "this site is client '" + *cn + "'");
  }
}

void check_data(const DataSource& source, tls::CheckReport& report) {
  const std::string what = source.format + (source.path.empty() ? "" : " " + quoted(source.path));
  auto loaded = load_local_data(source);
  if (!loaded) {
    report.fail("data", what + ": " + loaded.error().message);
    return;
  }
  const std::string counts = std::to_string(loaded->train.size()) + " training and " +
                             std::to_string(loaded->test.size()) + " test samples";
  if (loaded->train.size() == 0) {
    report.fail("data", what + ": " + counts + ": nothing to train on");
  } else if (loaded->test.size() == 0) {
    report.warn("data", what + ": " + counts +
                            ": no local test part, so this site cannot "
                            "take part in federated evaluation");
  } else {
    report.ok("data", what + ": " + counts);
  }
}

void check_audit_log(const std::string& path, tls::CheckReport& report) {
  if (path.empty()) {
    report.ok("audit_log", "none configured (optional)");
    return;
  }
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  const fs::path folder = parent.empty() ? fs::path(".") : parent;
  if (!fs::is_directory(folder, ec) || ::access(folder.c_str(), W_OK | X_OK) != 0) {
    report.fail("audit_log", "the folder " + quoted(folder.string()) + " of " + quoted(path) +
                                 " is missing or not writable");
    return;
  }
  if (!fs::exists(path, ec)) {
    report.ok("audit_log", quoted(path) + " will be created");
    return;
  }
  if (::access(path.c_str(), R_OK | W_OK) != 0) {
    report.fail("audit_log", quoted(path) + " is not readable and writable by this user");
    return;
  }
  auto summary = verify_audit_log(path);
  if (!summary) {
    report.fail("audit_log", summary.error().message);
    return;
  }
  report.ok("audit_log",
            quoted(path) + ": " + std::to_string(summary->lines) + " line(s), chain intact");
}

// The folder the daemon creates at start, and the FedBN file it would continue from.
void check_site_state(const std::string& dir, tls::CheckReport& report) {
  if (dir.empty()) {
    report.ok("site_state",
              "none configured (optional: FedBN values and the DP ledger stay in memory)");
    return;
  }
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    report.ok("site_state", quoted(dir) + " will be created");
    return;
  }
  if (!fs::is_directory(dir, ec) || ::access(dir.c_str(), W_OK | X_OK) != 0) {
    report.fail("site_state", quoted(dir) + " is not a writable folder");
    return;
  }
  SiteBatchNorm kept;
  if (auto opened = kept.persist_to((fs::path(dir) / "site-batch-norm.fcp").string()); !opened) {
    report.fail("site_state", opened.error().message);
    return;
  }
  RecordDpLedger ledger(0);
  if (auto opened = ledger.persist_to((fs::path(dir) / "dp-ledger.json").string()); !opened) {
    report.fail("site_state", opened.error().message);
    return;
  }
  report.ok("site_state", quoted(dir) + ": a writable folder");
}

void check_policy(const SitePolicy& p, tls::CheckReport& report) {
  std::string limits;
  const auto add = [&limits](const std::string& part) {
    limits += (limits.empty() ? "" : ", ") + part;
  };
  if (!p.allowed_model_types.empty()) {
    std::string types;
    for (const auto& type : p.allowed_model_types) {
      types += (types.empty() ? "" : "|") + type;
    }
    add("models " + types);
  }
  if (p.max_parameters) {
    add("at most " + std::to_string(*p.max_parameters) + " parameters");
  }
  if (p.max_local_epochs) {
    add("at most " + std::to_string(*p.max_local_epochs) + " local epochs");
  }
  if (p.max_rounds_per_day) {
    add("at most " + std::to_string(*p.max_rounds_per_day) + " rounds a day");
  }
  if (p.require_secure_aggregation) {
    add("secure aggregation required");
  }
  if (p.max_epsilon) {
    add("DP required, epsilon at most " + number(*p.max_epsilon));
  }
  if (!p.server.sha256.empty() || !p.server.common_name.empty()) {
    add("server pinned");
  }
  if (p.max_epsilon && *p.max_epsilon > 10) {
    report.warn("policy", "max_epsilon " + number(*p.max_epsilon) +
                              " is above 10, where differential privacy protects little");
    return;
  }
  report.ok("policy",
            limits.empty() ? "no limits: the site accepts every run the server proposes" : limits);
}

}  // namespace

tls::CheckReport check_client_config(const std::string& path, const tls::CheckOptions& options) {
  tls::CheckReport report;
  const auto text = tls::read_config_file(path, report);
  if (!text) {
    return report;
  }
  auto config = parse_client_config_text(*text);
  if (!config) {
    report.fail("config", quoted(path) + ": " + config.error().message);
    return report;
  }
  report.ok("config", quoted(path) + " parses strictly");

  const tls::ClientTlsConfig& tls_config = config->tls;
  tls::check_tls_files({.ca = tls_config.ca_file,
                        .cert = tls_config.cert_file,
                        .key = tls_config.key_file,
                        .crl = {},
                        .role = tls::CertificateRole::client,
                        .crl_required = false},
                       options, report);
  if (!report.has_failures("tls.cert")) {
    check_identity(tls_config.cert_file, report);
  }
  if (!report.has_failures("tls.")) {
    auto context = tls::make_client_context(tls_config);
    if (context) {
      report.ok("tls context", "the client's TLS context builds as at start (server name '" +
                                   tls_config.server_name + "')");
    } else {
      report.fail("tls context", context.error().message);
    }
  }
  check_data(config->data, report);
  check_audit_log(config->audit_log, report);
  check_site_state(config->site_state, report);
  check_policy(config->policy, report);
  return report;
}

}  // namespace fedcore::client
