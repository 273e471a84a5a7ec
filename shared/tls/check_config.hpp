// The checks `fedcore-server --check-config` and `fedcore-client --check-config` share: a
// report of ok / warn / FAIL lines, and the checks of a config's TLS material.
//
// A report line names what was checked ("tls.cert chain") and why it passed or failed, for
// an operator reading it before a start:
//
//   ok    tls.cert          'server/fedcore-server.pem': CN=fedcore-server, serial 1A2B
//   warn  tls.cert expiry   expires 2025-12-01 09:00 UTC, in 12 days (renew: fedcore-pki server)
//   FAIL  tls.crl freshness next update was 2025-11-01 09:00 UTC: the server refuses every client
//
// check_tls_files() reads files and nothing else: no network, no TLS context, no change to
// any file. Every time it judges is taken from CheckOptions::now (tests move the clock;
// certificates are never made with past dates).
//
// Thread safety: the functions are safe to call concurrently; a CheckReport is not shared.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/util/error.hpp"

namespace fedcore::tls {

enum class CheckStatus { ok, warn, fail };

// "ok", "warn", "FAIL" (upper case: the word an operator's eye must catch).
std::string_view check_status_name(CheckStatus status) noexcept;

struct CheckLine {
  CheckStatus status = CheckStatus::ok;
  std::string subject;  // what was checked: "config", "tls.key", "data", ...
  std::string reason;   // why it passed, or what is wrong and what to do
};

class CheckReport {
 public:
  void add(CheckStatus status, std::string subject, std::string reason);
  void ok(std::string subject, std::string reason);
  void warn(std::string subject, std::string reason);
  void fail(std::string subject, std::string reason);

  const std::vector<CheckLine>& lines() const noexcept { return lines_; }
  // The first line about `subject`, nullptr when there is none.
  const CheckLine* find(std::string_view subject) const noexcept;
  // Whether any line of a subject starting with `prefix` ("tls.") failed ("" = any line).
  bool has_failures(std::string_view prefix = {}) const noexcept;
  // One line per check (status, subject and reason in columns), then a summary:
  // "3 ok, 1 warn, 0 FAIL".
  std::string to_text() const;

 private:
  std::vector<CheckLine> lines_;
};

struct CheckOptions {
  std::chrono::system_clock::time_point now = std::chrono::system_clock::now();
  // A certificate (CA or leaf) that ends within this time is a warning.
  std::chrono::seconds certificate_warning = std::chrono::hours(24 * 30);
  // A CRL whose nextUpdate is within this time is a warning; past it, a failure.
  std::chrono::seconds crl_warning = std::chrono::hours(24 * 7);
};

// Which end of a connection the certificate is for: its chain is verified for that TLS
// purpose (extendedKeyUsage serverAuth or clientAuth, as the handshake does).
enum class CertificateRole { server, client };

struct TlsFiles {
  std::string ca;    // PEM: the federation CA certificate(s)
  std::string cert;  // PEM: this end's certificate
  std::string key;   // PEM: its private key (unencrypted)
  std::string crl;   // PEM: the CA's CRL; "" = none configured
  CertificateRole role = CertificateRole::server;
  bool crl_required = false;  // the server: it refuses every client without a CRL
};

// Adds lines for the files of `files`, in this order (a check that cannot run because an
// earlier one failed is left out, rather than failing twice for one cause):
//   tls.ca            readable, only CA certificates, none expired (warn: ending soon)
//   tls.cert          readable, one certificate (its subject and serial)
//   tls.cert expiry   not before its start, not expired (warn: within certificate_warning)
//   tls.cert chain    verifies against tls.ca for the role's purpose (times not judged here)
//   tls.key           readable, an unencrypted private key, the certificate's (warn: the file
//                     is readable by group or others)
//   tls.crl           readable, parses, signed by a certificate of tls.ca (FAIL when absent
//                     and crl_required; no line when absent and not required)
//   tls.crl freshness lastUpdate passed and nextUpdate ahead (warn: within crl_warning)
//   tls.cert revoked  the certificate is not on the CRL
void check_tls_files(const TlsFiles& files, const CheckOptions& options, CheckReport& report);

// The subject CN of the first certificate in a PEM file. Errors: not_found / io_error (the
// file), invalid_argument (no certificate, no CN or more than one).
result<std::string> certificate_common_name(const std::string& cert_file);

// "2025-12-01 09:00 UTC"
std::string format_utc(std::chrono::system_clock::time_point time);

// The text of the config file being checked, or nullopt after a FAIL "config" line saying
// it cannot be read (the first step of both binaries' --check-config).
std::optional<std::string> read_config_file(const std::string& path, CheckReport& report);

}  // namespace fedcore::tls
