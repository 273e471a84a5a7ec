#include "shared/tls/check_config.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "shared/util/openssl_ptr.hpp"

namespace fedcore::tls {
namespace {

using Clock = std::chrono::system_clock;

struct StackFree {
  void operator()(STACK_OF(X509) * p) const noexcept { sk_X509_free(p); }
};
using openssl::bio_ptr;
using openssl::crl_ptr;
using openssl::pkey_ptr;
using openssl::x509_ptr;

std::string quoted(const std::string& path) {
  return "'" + path + "'";
}

// OpenSSL's queued reasons, oldest first, leaving the queue empty for the next check.
std::string openssl_errors() {
  std::string out;
  char buffer[256];
  while (const unsigned long code = ERR_get_error()) {
    ERR_error_string_n(code, buffer, sizeof buffer);
    out += out.empty() ? "" : "; ";
    out += buffer;
  }
  return out.empty() ? "no OpenSSL error reported" : out;
}

// Why `path` cannot be read as a file, or nullopt when it can. Stated separately from a
// parse failure, which OpenSSL would report for all of these as one "system library" error.
std::optional<std::string> unreadable(const std::string& path) {
  if (path.empty()) {
    return "not configured (empty path)";
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int saved = errno;
    if (saved == ENOENT || saved == ENOTDIR) {
      return quoted(path) + " does not exist";
    }
    return "cannot access " + quoted(path) + ": " + std::strerror(saved);
  }
  if (!S_ISREG(info.st_mode)) {
    return quoted(path) + " is not a regular file";
  }
  if (::access(path.c_str(), R_OK) != 0) {
    return "cannot read " + quoted(path) + ": " + std::strerror(errno);
  }
  return std::nullopt;
}

// A key file that turns out to be encrypted must fail, not prompt on a terminal.
int refuse_password(char*, int, int, void*) {
  return -1;
}

// Every PEM certificate in the file; an error string when it cannot be read, holds a
// malformed block, or holds none.
result<std::vector<x509_ptr>> read_certificates(const std::string& path) {
  if (auto why = unreadable(path)) {
    return fail(errc::not_found, *why);
  }
  bio_ptr bio(BIO_new_file(path.c_str(), "r"));
  if (!bio) {
    return fail(errc::io_error, "cannot open " + quoted(path) + ": " + openssl_errors());
  }
  std::vector<x509_ptr> certs;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, refuse_password, nullptr)) {
    certs.emplace_back(cert);
  }
  // The end of the input is PEM_R_NO_START_LINE; anything else is a malformed block.
  const unsigned long last = ERR_peek_last_error();
  if (!(last != 0 && ERR_GET_LIB(last) == ERR_LIB_PEM &&
        ERR_GET_REASON(last) == PEM_R_NO_START_LINE)) {
    return fail(errc::invalid_argument,
                quoted(path) + " holds a malformed PEM certificate: " + openssl_errors());
  }
  ERR_clear_error();
  if (certs.empty()) {
    return fail(errc::invalid_argument, quoted(path) + " holds no PEM certificate");
  }
  return certs;
}

std::string name_text(const X509_NAME* name) {
  bio_ptr bio(BIO_new(BIO_s_mem()));
  if (!bio || X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253) < 0) {
    ERR_clear_error();
    return "?";
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return n > 0 ? std::string(data, static_cast<std::size_t>(n)) : std::string();
}

std::string serial_text(const X509* cert) {
  std::unique_ptr<BIGNUM, decltype(&BN_free)> number(
      ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr), &BN_free);
  char* hex = number ? BN_bn2hex(number.get()) : nullptr;
  if (hex == nullptr) {
    ERR_clear_error();
    return "?";
  }
  std::string out(hex);
  OPENSSL_free(hex);
  return out;
}

std::optional<Clock::time_point> to_time_point(const ASN1_TIME* time) {
  std::tm tm{};
  if (time == nullptr || ASN1_TIME_to_tm(time, &tm) != 1) {
    ERR_clear_error();
    return std::nullopt;
  }
  return Clock::from_time_t(timegm(&tm));
}

// "in 12 days", "in 5 hours", "12 days ago".
std::string distance(Clock::time_point when, Clock::time_point now) {
  using std::chrono::duration_cast;
  using std::chrono::hours;
  const auto span = when >= now ? when - now : now - when;
  const auto h = duration_cast<hours>(span).count();
  const std::string amount = h >= 48 ? std::to_string(h / 24) + " days"
                                     : std::to_string(h) + (h == 1 ? " hour" : " hours");
  return when >= now ? "in " + amount : amount + " ago";
}

// The validity window of one certificate at options.now: FAIL before its start or after its
// end, warn within the warning time, ok otherwise.
void check_validity(CheckReport& report, const std::string& subject, const std::string& what,
                    const X509* cert, const CheckOptions& options, const std::string& renew) {
  const auto not_before = to_time_point(X509_get0_notBefore(cert));
  const auto not_after = to_time_point(X509_get0_notAfter(cert));
  if (!not_before || !not_after) {
    report.fail(subject, what + ": unreadable validity dates");
    return;
  }
  const auto now = options.now;
  if (now < *not_before) {
    report.fail(subject, what + " is not valid before " + format_utc(*not_before) + " (" +
                             distance(*not_before, now) + "); check this machine's clock");
  } else if (now > *not_after) {
    report.fail(subject, what + " expired " + format_utc(*not_after) + " (" +
                             distance(*not_after, now) + "); " + renew);
  } else if (*not_after - now < options.certificate_warning) {
    report.warn(subject, what + " expires " + format_utc(*not_after) + ", " +
                             distance(*not_after, now) + "; " + renew);
  } else {
    report.ok(subject, what + " is valid until " + format_utc(*not_after) + " (" +
                           distance(*not_after, now) + ")");
  }
}

// tls.ca: the trust anchors. Returns them for the chain and CRL checks (empty on failure).
std::vector<x509_ptr> check_ca(const TlsFiles& files, const CheckOptions& options,
                               CheckReport& report) {
  auto certs = read_certificates(files.ca);
  if (!certs) {
    report.fail("tls.ca", certs.error().message);
    return {};
  }
  for (const auto& cert : *certs) {
    if (X509_check_ca(cert.get()) < 1) {
      report.fail("tls.ca", quoted(files.ca) + " holds '" +
                                name_text(X509_get_subject_name(cert.get())) +
                                "', which is not a CA certificate");
      return {};
    }
  }
  // The CA ending soonest decides; a CA that ends ends every certificate it signed.
  const auto ends = [](const x509_ptr& a, const x509_ptr& b) {
    return ASN1_TIME_compare(X509_get0_notAfter(a.get()), X509_get0_notAfter(b.get())) < 0;
  };
  const X509* first = std::min_element(certs->begin(), certs->end(), ends)->get();
  check_validity(report, "tls.ca",
                 quoted(files.ca) + ": " + std::to_string(certs->size()) + " CA certificate(s), '" +
                     name_text(X509_get_subject_name(first)) + "'",
                 first, options, "a new CA means new certificates for every site");
  return std::move(*certs);
}

// tls.cert chain: the same verification a peer's handshake performs (strict X.509, the
// role's purpose, depth 2), with the times left to the expiry lines.
void check_chain(const TlsFiles& files, const std::vector<x509_ptr>& anchors,
                 const std::vector<x509_ptr>& chain, CheckReport& report) {
  openssl::store_ptr store(X509_STORE_new());
  openssl::store_ctx_ptr ctx(X509_STORE_CTX_new());
  std::unique_ptr<STACK_OF(X509), StackFree> untrusted(sk_X509_new_null());
  if (!store || !ctx || !untrusted) {
    report.fail("tls.cert chain", "cannot verify: " + openssl_errors());
    return;
  }
  for (const auto& anchor : anchors) {
    X509_STORE_add_cert(store.get(), anchor.get());
  }
  for (std::size_t i = 1; i < chain.size(); ++i) {
    sk_X509_push(untrusted.get(), chain[i].get());  // borrowed; freed with `chain`
  }
  if (X509_STORE_CTX_init(ctx.get(), store.get(), chain.front().get(), untrusted.get()) != 1) {
    report.fail("tls.cert chain", "cannot verify: " + openssl_errors());
    return;
  }
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx.get());
  X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_X509_STRICT | X509_V_FLAG_NO_CHECK_TIME);
  X509_VERIFY_PARAM_set_depth(param, 2);
  const bool server = files.role == CertificateRole::server;
  X509_STORE_CTX_set_purpose(ctx.get(), server ? X509_PURPOSE_SSL_SERVER : X509_PURPOSE_SSL_CLIENT);
  const std::string purpose = server ? "a TLS server" : "a TLS client";
  if (X509_verify_cert(ctx.get()) == 1) {
    report.ok("tls.cert chain", "verifies against " + quoted(files.ca) + " for use as " + purpose);
  } else {
    const int code = X509_STORE_CTX_get_error(ctx.get());
    report.fail("tls.cert chain", "does not verify against " + quoted(files.ca) + " for use as " +
                                      purpose + ": " + X509_verify_cert_error_string(code) +
                                      " (is it from another CA, or for the other role?)");
  }
  ERR_clear_error();
}

void check_key(const TlsFiles& files, const X509* cert, CheckReport& report) {
  if (auto why = unreadable(files.key)) {
    report.fail("tls.key", *why);
    return;
  }
  bio_ptr bio(BIO_new_file(files.key.c_str(), "r"));
  pkey_ptr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, refuse_password, nullptr)
                   : nullptr);
  if (!key) {
    report.fail("tls.key",
                quoted(files.key) + " is not an unencrypted PEM private key: " + openssl_errors());
    return;
  }
  if (cert != nullptr && X509_check_private_key(cert, key.get()) != 1) {
    ERR_clear_error();
    report.fail("tls.key", quoted(files.key) + " does not belong to the certificate " +
                               quoted(files.cert) + " (a key from another certificate?)");
    return;
  }
  struct stat info {};
  if (::stat(files.key.c_str(), &info) == 0 && (info.st_mode & 0077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(info.st_mode & 07777));
    report.warn("tls.key", quoted(files.key) + " is readable by other users (mode " + mode +
                               "); chmod 600 it");
    return;
  }
  report.ok("tls.key", quoted(files.key) +
                           (cert != nullptr ? ": matches the certificate" : ": a private key"));
}

void check_crl_freshness(const X509_CRL* crl, const CheckOptions& options, CheckReport& report) {
  const auto last = to_time_point(X509_CRL_get0_lastUpdate(crl));
  const auto next = to_time_point(X509_CRL_get0_nextUpdate(crl));
  const auto now = options.now;
  const std::string renew = "re-issue it with 'fedcore-pki crl' and copy it to the server";
  if (!last) {
    report.fail("tls.crl freshness", "unreadable lastUpdate");
  } else if (now < *last) {
    report.fail("tls.crl freshness",
                "not valid before " + format_utc(*last) + "; check this machine's clock");
  } else if (!next) {
    report.warn("tls.crl freshness", "the CRL has no nextUpdate: its age cannot be judged");
  } else if (now > *next) {
    report.fail("tls.crl freshness", "expired " + format_utc(*next) + " (" + distance(*next, now) +
                                         "): the server refuses every client; " + renew);
  } else if (*next - now < options.crl_warning) {
    report.warn("tls.crl freshness",
                "next update " + format_utc(*next) + ", " + distance(*next, now) + "; " + renew);
  } else {
    report.ok("tls.crl freshness",
              "next update " + format_utc(*next) + " (" + distance(*next, now) + ")");
  }
}

// tls.crl and its freshness; `cert` (may be null) is looked up in it.
void check_crl(const TlsFiles& files, const std::vector<x509_ptr>& anchors, const X509* cert,
               const CheckOptions& options, CheckReport& report) {
  if (files.crl.empty()) {
    if (files.crl_required) {
      report.fail("tls.crl", "no CRL configured ('tls.crl'): every client would be refused");
    }
    return;
  }
  if (auto why = unreadable(files.crl)) {
    report.fail("tls.crl", *why);
    return;
  }
  bio_ptr bio(BIO_new_file(files.crl.c_str(), "r"));
  std::vector<crl_ptr> crls;
  while (X509_CRL* crl =
             bio ? PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr) : nullptr) {
    crls.emplace_back(crl);
  }
  ERR_clear_error();
  if (crls.empty()) {
    report.fail("tls.crl", quoted(files.crl) + " holds no PEM CRL");
    return;
  }
  // The CRL that matters is the one of the CA in tls.ca: signed by it.
  X509_CRL* signed_crl = nullptr;
  std::string signer;
  for (const auto& crl : crls) {
    for (const auto& anchor : anchors) {
      EVP_PKEY* public_key = X509_get0_pubkey(anchor.get());
      if (X509_NAME_cmp(X509_CRL_get_issuer(crl.get()), X509_get_subject_name(anchor.get())) == 0 &&
          public_key != nullptr && X509_CRL_verify(crl.get(), public_key) == 1) {
        signed_crl = crl.get();
        signer = name_text(X509_get_subject_name(anchor.get()));
        break;
      }
    }
    ERR_clear_error();
    if (signed_crl != nullptr) {
      break;
    }
  }
  if (anchors.empty()) {
    report.warn("tls.crl",
                quoted(files.crl) + " parses; its signer is not checked (tls.ca failed)");
    return;
  }
  if (signed_crl == nullptr) {
    report.fail("tls.crl", quoted(files.crl) + " is not signed by the CA in " + quoted(files.ca) +
                               " (issuer '" + name_text(X509_CRL_get_issuer(crls.front().get())) +
                               "')");
    return;
  }
  const int revoked = sk_X509_REVOKED_num(X509_CRL_get_REVOKED(signed_crl));
  report.ok("tls.crl", quoted(files.crl) + ": signed by '" + signer + "', " +
                           std::to_string(std::max(revoked, 0)) + " revoked certificate(s)");
  check_crl_freshness(signed_crl, options, report);
  if (cert != nullptr) {
    X509_REVOKED* entry = nullptr;
    if (X509_CRL_get0_by_cert(signed_crl, &entry, const_cast<X509*>(cert)) == 1) {
      report.fail("tls.cert revoked", quoted(files.cert) + " (serial " + serial_text(cert) +
                                          ") is revoked by " + quoted(files.crl));
    } else {
      report.ok("tls.cert revoked", "not on the CRL");
    }
    ERR_clear_error();
  }
}

}  // namespace

std::string_view check_status_name(CheckStatus status) noexcept {
  switch (status) {
    case CheckStatus::ok:
      return "ok";
    case CheckStatus::warn:
      return "warn";
    case CheckStatus::fail:
      return "FAIL";
  }
  return "?";
}

void CheckReport::add(CheckStatus status, std::string subject, std::string reason) {
  lines_.push_back({status, std::move(subject), std::move(reason)});
}
void CheckReport::ok(std::string subject, std::string reason) {
  add(CheckStatus::ok, std::move(subject), std::move(reason));
}
void CheckReport::warn(std::string subject, std::string reason) {
  add(CheckStatus::warn, std::move(subject), std::move(reason));
}
void CheckReport::fail(std::string subject, std::string reason) {
  add(CheckStatus::fail, std::move(subject), std::move(reason));
}

const CheckLine* CheckReport::find(std::string_view subject) const noexcept {
  for (const auto& line : lines_) {
    if (line.subject == subject) {
      return &line;
    }
  }
  return nullptr;
}

bool CheckReport::has_failures(std::string_view prefix) const noexcept {
  return std::any_of(lines_.begin(), lines_.end(), [&](const CheckLine& line) {
    return line.status == CheckStatus::fail && line.subject.starts_with(prefix);
  });
}

std::string CheckReport::to_text() const {
  std::size_t width = 0;
  for (const auto& line : lines_) {
    width = std::max(width, line.subject.size());
  }
  std::string out;
  std::size_t counts[3] = {0, 0, 0};
  for (const auto& line : lines_) {
    ++counts[static_cast<int>(line.status)];
    std::string status(check_status_name(line.status));
    status.resize(6, ' ');
    std::string subject = line.subject;
    subject.resize(width + 2, ' ');
    out += status + subject + line.reason + "\n";
  }
  out += std::to_string(counts[0]) + " ok, " + std::to_string(counts[1]) + " warn, " +
         std::to_string(counts[2]) + " FAIL\n";
  return out;
}

void check_tls_files(const TlsFiles& files, const CheckOptions& options, CheckReport& report) {
  const auto anchors = check_ca(files, options, report);
  std::vector<x509_ptr> chain;
  if (auto certs = read_certificates(files.cert); !certs) {
    report.fail("tls.cert", certs.error().message);
  } else {
    chain = std::move(*certs);
    const X509* leaf = chain.front().get();
    report.ok("tls.cert", quoted(files.cert) + ": '" + name_text(X509_get_subject_name(leaf)) +
                              "', serial " + serial_text(leaf));
    check_validity(report, "tls.cert expiry", "the certificate", leaf, options,
                   files.role == CertificateRole::server
                       ? "renew it with 'fedcore-pki server NAME --force'"
                       : "ask the federation for a new one ('fedcore-pki client ID --force')");
    if (!anchors.empty()) {
      check_chain(files, anchors, chain, report);
    }
  }
  const X509* leaf = chain.empty() ? nullptr : chain.front().get();
  check_key(files, leaf, report);
  check_crl(files, anchors, leaf, options, report);
}

result<std::string> certificate_common_name(const std::string& cert_file) {
  auto certs = read_certificates(cert_file);
  if (!certs) {
    return certs.error();
  }
  const X509_NAME* subject = X509_get_subject_name(certs->front().get());
  const int at = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (at < 0 || X509_NAME_get_index_by_NID(subject, NID_commonName, at) >= 0) {
    return fail(errc::invalid_argument,
                quoted(cert_file) + ": the certificate needs exactly one subject CN");
  }
  const ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at));
  unsigned char* utf8 = nullptr;
  const int n = ASN1_STRING_to_UTF8(&utf8, data);
  if (n < 0) {
    ERR_clear_error();
    return fail(errc::invalid_argument, quoted(cert_file) + ": unreadable subject CN");
  }
  std::string cn(reinterpret_cast<const char*>(utf8), static_cast<std::size_t>(n));
  OPENSSL_free(utf8);
  return cn;
}

std::string format_utc(std::chrono::system_clock::time_point time) {
  const std::time_t t = Clock::to_time_t(time);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char buffer[32];
  const std::size_t n = std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M UTC", &utc);
  return std::string(buffer, n);
}

std::optional<std::string> read_config_file(const std::string& path, CheckReport& report) {
  std::ifstream in(path);
  if (!in) {
    report.fail("config", "cannot read " + quoted(path));
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace fedcore::tls
