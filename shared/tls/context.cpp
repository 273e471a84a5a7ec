#include "shared/tls/context.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <netinet/in.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include <boost/system/system_error.hpp>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "shared/util/assert.hpp"
#include "shared/util/openssl_ptr.hpp"

namespace fedcore::tls {
namespace {

namespace ssl = boost::asio::ssl;

// Leaf plus at most two issuers. The federation CA signs leaves directly; the slack is for
// an intermediate introduced later, not for arbitrary chains.
constexpr int kVerifyDepth = 2;

using openssl::bio_ptr;
using openssl::crl_ptr;
using openssl::pkey_ptr;
using openssl::x509_ptr;

// All of the thread's queued OpenSSL errors, oldest first; the queue is left empty so a
// later failure does not report this one's causes.
std::string drain_openssl_errors() {
  std::string out;
  char buffer[256];
  while (const unsigned long code = ERR_get_error()) {
    ERR_error_string_n(code, buffer, sizeof buffer);
    if (!out.empty()) {
      out += "; ";
    }
    out += buffer;
  }
  return out.empty() ? "no OpenSSL error reported" : out;
}

error openssl_failure(errc code, const std::string& what) {
  return fail(code, what + ": " + drain_openssl_errors());
}

std::string quoted(const std::string& role, const std::string& path) {
  return role + " '" + path + "'";
}

// A key file that turns out to be encrypted must fail, not make OpenSSL prompt on the
// terminal of a server that has none.
int refuse_password(char*, int, int, void*) {
  return -1;
}

// Distinguishes the caller's three mistakes (nothing configured, wrong path, unreadable
// file) before OpenSSL reports them all as one generic "system library" error.
result<void> check_readable(const std::string& role, const std::string& path) {
  if (path.empty()) {
    return fail(errc::invalid_argument, "no " + role + " configured (empty path)");
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int saved = errno;
    if (saved == ENOENT || saved == ENOTDIR) {
      return fail(errc::not_found, quoted(role, path) + " does not exist");
    }
    return fail(errc::io_error,
                "cannot access " + quoted(role, path) + ": " + std::strerror(saved));
  }
  if (!S_ISREG(info.st_mode)) {
    return fail(errc::invalid_argument, quoted(role, path) + " is not a regular file");
  }
  if (::access(path.c_str(), R_OK) != 0) {
    return fail(errc::io_error, "cannot read " + quoted(role, path) + ": " + std::strerror(errno));
  }
  return {};
}

result<bio_ptr> open_file(const std::string& role, const std::string& path) {
  if (auto readable = check_readable(role, path); !readable) {
    return readable.error();
  }
  bio_ptr bio(BIO_new_file(path.c_str(), "r"));
  if (!bio) {
    return openssl_failure(errc::io_error, "cannot open " + quoted(role, path));
  }
  return bio;
}

// PEM_read_bio_* signal the end of the input with PEM_R_NO_START_LINE; anything else on the
// queue means a block was malformed.
bool only_end_of_input_queued() {
  const unsigned long last = ERR_peek_last_error();
  return last != 0 && ERR_GET_LIB(last) == ERR_LIB_PEM &&
         ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
}

// A certificate serial as uppercase hex without leading zeros ("" when unreadable): the
// form CRL entries and certificates are compared in.
std::string serial_hex(const ASN1_INTEGER* serial) {
  if (serial == nullptr) {
    return {};
  }
  std::unique_ptr<BIGNUM, decltype(&BN_free)> number(ASN1_INTEGER_to_BN(serial, nullptr), &BN_free);
  if (!number) {
    return {};
  }
  char* hex = BN_bn2hex(number.get());
  if (hex == nullptr) {
    return {};
  }
  std::string out(hex);
  OPENSSL_free(hex);
  return out;
}

result<std::vector<x509_ptr>> read_ca_certificates(const std::string& role,
                                                   const std::string& path) {
  auto bio = open_file(role, path);
  if (!bio) {
    return bio.error();
  }
  std::vector<x509_ptr> certs;
  while (X509* cert = PEM_read_bio_X509(bio->get(), nullptr, refuse_password, nullptr)) {
    certs.emplace_back(cert);
  }
  if (!only_end_of_input_queued()) {
    return openssl_failure(errc::invalid_argument,
                           quoted(role, path) + " holds a malformed PEM certificate");
  }
  ERR_clear_error();
  if (certs.empty()) {
    return fail(errc::invalid_argument, quoted(role, path) + " holds no PEM certificate");
  }
  for (const auto& cert : certs) {
    // A leaf certificate given as the CA would make every handshake fail later, with a
    // message about the peer rather than about this file.
    if (X509_check_ca(cert.get()) < 1) {
      char subject[256];
      X509_NAME_oneline(X509_get_subject_name(cert.get()), subject, sizeof subject);
      return fail(errc::invalid_argument, quoted(role, path) + " holds certificate '" + subject +
                                              "', which is not a CA certificate");
    }
  }
  return certs;
}

// Makes the certificates the context's only trust anchors: the store starts empty and the
// system's default verify paths are never loaded.
result<std::vector<x509_ptr>> load_trust_anchors(SSL_CTX* ctx, const std::string& role,
                                                 const std::string& path) {
  auto certs = read_ca_certificates(role, path);
  if (!certs) {
    return certs.error();
  }
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  for (const auto& cert : *certs) {
    if (X509_STORE_add_cert(store, cert.get()) != 1) {
      return openssl_failure(errc::invalid_argument, "cannot trust " + quoted(role, path));
    }
  }
  return certs;
}

// Loads every CRL in the file after checking each is signed by one of the trust anchors, so
// a CRL from another CA (which would revoke nothing here) is a configuration error now, not
// a refusal of every client later.
result<std::set<std::string>> load_crls(X509_STORE* store, const std::string& role,
                                        const std::string& path, const std::string& ca_path,
                                        const std::vector<x509_ptr>& anchors) {
  auto bio = open_file(role, path);
  if (!bio) {
    return bio.error();
  }
  std::vector<crl_ptr> crls;
  while (X509_CRL* crl = PEM_read_bio_X509_CRL(bio->get(), nullptr, refuse_password, nullptr)) {
    crls.emplace_back(crl);
  }
  if (!only_end_of_input_queued()) {
    return openssl_failure(errc::invalid_argument,
                           quoted(role, path) + " holds a malformed PEM CRL");
  }
  ERR_clear_error();
  if (crls.empty()) {
    return fail(errc::invalid_argument, quoted(role, path) + " holds no PEM CRL");
  }
  std::set<std::string> revoked;
  for (const auto& crl : crls) {
    bool signed_by_anchor = false;
    for (const auto& anchor : anchors) {
      if (X509_NAME_cmp(X509_get_subject_name(anchor.get()), X509_CRL_get_issuer(crl.get())) == 0 &&
          X509_CRL_verify(crl.get(), X509_get0_pubkey(anchor.get())) == 1) {
        signed_by_anchor = true;
        break;
      }
    }
    ERR_clear_error();
    if (!signed_by_anchor) {
      char issuer[256];
      X509_NAME_oneline(X509_CRL_get_issuer(crl.get()), issuer, sizeof issuer);
      return fail(errc::invalid_argument, quoted(role, path) + " holds a CRL from '" + issuer +
                                              "', which is not signed by a CA in '" + ca_path +
                                              "'");
    }
    if (X509_STORE_add_crl(store, crl.get()) != 1) {
      return openssl_failure(errc::invalid_argument, "cannot use " + quoted(role, path));
    }
    const STACK_OF(X509_REVOKED)* entries = X509_CRL_get_REVOKED(crl.get());
    for (int i = 0; entries != nullptr && i < sk_X509_REVOKED_num(entries); ++i) {
      revoked.insert(serial_hex(X509_REVOKED_get0_serialNumber(sk_X509_REVOKED_value(entries, i))));
    }
  }
  return revoked;
}

// Loads the certificate chain and the private key, and checks that they belong together and
// that the certificate may be used for this side of the connection.
result<void> load_identity(SSL_CTX* ctx, const std::string& side, const std::string& cert_file,
                           const std::string& key_file, int purpose) {
  const std::string cert_role = side + " certificate file";
  const std::string key_role = side + " private key file";
  if (auto readable = check_readable(cert_role, cert_file); !readable) {
    return readable.error();
  }
  auto key_bio = open_file(key_role, key_file);
  if (!key_bio) {
    return key_bio.error();
  }
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    return openssl_failure(errc::invalid_argument,
                           "cannot load " + quoted(cert_role, cert_file) + " as a PEM certificate");
  }
  pkey_ptr key(PEM_read_bio_PrivateKey(key_bio->get(), nullptr, refuse_password, nullptr));
  if (!key) {
    return openssl_failure(errc::invalid_argument, "cannot load " + quoted(key_role, key_file) +
                                                       " as an unencrypted PEM private key");
  }
  if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    return openssl_failure(errc::invalid_argument, quoted(key_role, key_file) + " does not match " +
                                                       quoted(cert_role, cert_file));
  }
  if (X509_check_purpose(SSL_CTX_get0_certificate(ctx), purpose, 0) != 1) {
    ERR_clear_error();
    return fail(errc::invalid_argument,
                quoted(cert_role, cert_file) + " is not valid for TLS " +
                    (purpose == X509_PURPOSE_SSL_SERVER ? "server" : "client") +
                    " authentication (check its keyUsage and extendedKeyUsage)");
  }
  return {};
}

result<ssl::context> new_context(ssl::context::method method, const std::string& side) {
  try {
    ssl::context ctx(method);
    return result<ssl::context>(std::move(ctx));
  } catch (const boost::system::system_error& e) {
    return fail(errc::internal, "cannot create the " + side + " TLS context: " + e.what());
  }
}

// The protocol policy both sides share (see the header).
result<void> apply_protocol_policy(SSL_CTX* ctx, const std::string& side) {
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_ciphersuites(ctx, kCipherSuites) != 1 ||
      X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(ctx), X509_V_FLAG_X509_STRICT) != 1) {
    return openssl_failure(errc::internal,
                           "cannot apply the TLS 1.3 policy to the " + side + " TLS context");
  }
  SSL_CTX_set_verify_depth(ctx, kVerifyDepth);
  // No client-side session reuse either: the client never offers a stale session.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  return {};
}

bool is_ip_literal(const std::string& name) {
  in_addr v4{};
  in6_addr v6{};
  return ::inet_pton(AF_INET, name.c_str(), &v4) == 1 ||
         ::inet_pton(AF_INET6, name.c_str(), &v6) == 1;
}

// A DNS name (labels of [A-Za-z0-9_-], optionally with a trailing dot) or an IP literal.
// Anything else cannot match a certificate and is most likely a configuration mistake.
result<void> check_server_name(const std::string& name) {
  if (name.empty()) {
    return fail(errc::invalid_argument, "no TLS server name configured (empty)");
  }
  if (name.size() > 253) {
    return fail(errc::invalid_argument, "TLS server name of " + std::to_string(name.size()) +
                                            " characters; at most 253 allowed");
  }
  if (is_ip_literal(name)) {
    return {};
  }
  std::size_t label = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_';
    if (word) {
      ++label;
    } else if (c == '.' && label > 0) {
      label = 0;
    } else {
      return fail(errc::invalid_argument,
                  "TLS server name '" + name + "' is neither a host name nor an IP address");
    }
    if (label > 63) {
      return fail(errc::invalid_argument,
                  "TLS server name '" + name + "' has a label over 63 characters");
    }
  }
  return {};
}

// Sets the one identity the peer certificate must carry, clearing the other kind so a name
// set earlier (by the context) is not also required.
result<void> expect_server_identity(X509_VERIFY_PARAM* param, const std::string& name) {
  bool ok = false;
  if (is_ip_literal(name)) {
    ok = X509_VERIFY_PARAM_set1_host(param, nullptr, 0) == 1 &&
         X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) == 1;
  } else {
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    ok = X509_VERIFY_PARAM_set1_ip(param, nullptr, 0) == 1 &&
         X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size()) == 1;
  }
  if (!ok) {
    return openssl_failure(errc::internal, "cannot require TLS server name '" + name + "'");
  }
  return {};
}

// Certificate text is peer-controlled: make it safe to put in a log line.
std::string printable(const std::string& text) {
  std::string out;
  for (const char c : text.substr(0, 80)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    }
  }
  return text.size() > 80 ? out + "..." : out;
}

}  // namespace

result<ssl::context> make_server_context(const ServerTlsConfig& config) {
  // Errors queued by unrelated earlier calls on this thread are not ours to report.
  ERR_clear_error();
  const bool verify_clients = config.require_client_cert || !config.ca_file.empty();
  if (config.require_client_cert && config.ca_file.empty()) {
    return fail(errc::invalid_argument,
                "server TLS: client certificates are required but no CA file is configured");
  }
  if (verify_clients && config.crl_file.empty()) {
    return fail(errc::invalid_argument,
                "server TLS: client certificates are verified but no CRL file is configured; "
                "revocation must be checked");
  }
  auto ctx = new_context(ssl::context::tls_server, "server");
  if (!ctx) {
    return ctx.error();
  }
  SSL_CTX* native = ctx->native_handle();
  if (auto r = apply_protocol_policy(native, "server"); !r) {
    return r.error();
  }
  if (auto r = load_identity(native, "server", config.cert_file, config.key_file,
                             X509_PURPOSE_SSL_SERVER);
      !r) {
    return r.error();
  }
  if (verify_clients) {
    auto anchors = load_trust_anchors(native, "server CA file", config.ca_file);
    if (!anchors) {
      return anchors.error();
    }
    if (auto r = load_crls(SSL_CTX_get_cert_store(native), "server CRL file", config.crl_file,
                           config.ca_file, *anchors);
        !r) {
      return r.error();
    }
    if (X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(native), X509_V_FLAG_CRL_CHECK) != 1 ||
        SSL_CTX_set_purpose(native, X509_PURPOSE_SSL_CLIENT) != 1) {
      return openssl_failure(errc::internal, "cannot enable client certificate checks");
    }
    SSL_CTX_set_verify(native,
                       config.require_client_cert
                           ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                           : SSL_VERIFY_PEER,
                       nullptr);
  } else {
    SSL_CTX_set_verify(native, SSL_VERIFY_NONE, nullptr);
  }
  // A resumed session skips certificate verification, so a client revoked after its first
  // connection could come back on a ticket. TLS 1.3 servers send tickets even with
  // SSL_OP_NO_TICKET (stateful ones), hence num_tickets = 0 as well.
  SSL_CTX_set_options(native, SSL_OP_NO_TICKET | SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (SSL_CTX_set_num_tickets(native, 0) != 1 || SSL_CTX_set_max_early_data(native, 0) != 1) {
    return openssl_failure(errc::internal, "cannot disable session tickets and early data");
  }
  return ctx;
}

result<ssl::context> make_client_context(const ClientTlsConfig& config) {
  ERR_clear_error();
  if (auto r = check_server_name(config.server_name); !r) {
    return r.error();
  }
  auto ctx = new_context(ssl::context::tls_client, "client");
  if (!ctx) {
    return ctx.error();
  }
  SSL_CTX* native = ctx->native_handle();
  if (auto r = apply_protocol_policy(native, "client"); !r) {
    return r.error();
  }
  if (auto r = load_identity(native, "client", config.cert_file, config.key_file,
                             X509_PURPOSE_SSL_CLIENT);
      !r) {
    return r.error();
  }
  if (auto anchors = load_trust_anchors(native, "client CA file", config.ca_file); !anchors) {
    return anchors.error();
  }
  if (SSL_CTX_set_purpose(native, X509_PURPOSE_SSL_SERVER) != 1) {
    return openssl_failure(errc::internal, "cannot require a TLS server certificate");
  }
  if (auto r = expect_server_identity(SSL_CTX_get0_param(native), config.server_name); !r) {
    return r.error();
  }
  SSL_CTX_set_verify(native, SSL_VERIFY_PEER, nullptr);
  return ctx;
}

result<void> prepare_client_stream(SSL* ssl, const std::string& server_name) {
  ERR_clear_error();
  if (auto r = check_server_name(server_name); !r) {
    return r.error();
  }
  if (!is_ip_literal(server_name) && SSL_set_tlsext_host_name(ssl, server_name.c_str()) != 1) {
    return openssl_failure(errc::internal, "cannot set SNI '" + server_name + "'");
  }
  return expect_server_identity(SSL_get0_param(ssl), server_name);
}

result<std::string> peer_common_name(const SSL* ssl) {
  FEDCORE_ASSERT(ssl != nullptr, "peer_common_name: null SSL");
  if (!SSL_is_init_finished(ssl)) {
    return fail(errc::unauthenticated, "the TLS handshake has not completed");
  }
  const X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr) {
    return fail(errc::unauthenticated, "the peer presented no certificate");
  }
  if (const long verified = SSL_get_verify_result(ssl); verified != X509_V_OK) {
    return fail(errc::unauthenticated, std::string("the peer certificate did not verify: ") +
                                           X509_verify_cert_error_string(verified));
  }
  const X509_NAME* subject = X509_get_subject_name(cert);
  char subject_text[256];
  X509_NAME_oneline(subject, subject_text, sizeof subject_text);
  const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (index < 0) {
    return fail(errc::invalid_argument,
                "the peer certificate subject '" + printable(subject_text) + "' has no CN");
  }
  if (X509_NAME_get_index_by_NID(subject, NID_commonName, index) >= 0) {
    return fail(errc::invalid_argument, "the peer certificate subject '" + printable(subject_text) +
                                            "' has more than one CN");
  }
  const ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
  unsigned char* utf8 = nullptr;
  const int length = ASN1_STRING_to_UTF8(&utf8, data);
  if (length < 0) {
    return openssl_failure(errc::invalid_argument, "the peer certificate CN cannot be decoded");
  }
  std::string cn(reinterpret_cast<const char*>(utf8), static_cast<std::size_t>(length));
  OPENSSL_free(utf8);
  if (!is_valid_client_id(cn)) {
    return fail(errc::invalid_argument,
                "the peer certificate CN '" + printable(cn) +
                    "' is not a client id (1-64 characters of [A-Za-z0-9._-])");
  }
  return cn;
}

result<std::set<std::string>> reload_revocations(ssl::context& context,
                                                 const ServerTlsConfig& config) {
  ERR_clear_error();
  if (config.ca_file.empty() || config.crl_file.empty()) {
    return fail(errc::failed_precondition,
                "server TLS: no CA and CRL file configured; nothing to reload");
  }
  auto anchors = read_ca_certificates("server CA file", config.ca_file);
  if (!anchors) {
    return anchors.error();
  }
  // A fresh store, filled completely before it replaces the old one: a CRL file caught
  // half-written (or broken) leaves the server on the revocations it had.
  openssl::store_ptr store(X509_STORE_new());
  if (!store) {
    return openssl_failure(errc::internal, "cannot make a certificate store");
  }
  for (const auto& cert : *anchors) {
    if (X509_STORE_add_cert(store.get(), cert.get()) != 1) {
      return openssl_failure(errc::invalid_argument,
                             "cannot trust " + quoted("server CA file", config.ca_file));
    }
  }
  auto revoked =
      load_crls(store.get(), "server CRL file", config.crl_file, config.ca_file, *anchors);
  if (!revoked) {
    return revoked.error();
  }
  // Handshakes from now on verify against the new store (the CRL_CHECK flag lives in the
  // context's parameters, not in the store); the old store is freed here.
  SSL_CTX_set_cert_store(context.native_handle(), store.release());
  return revoked;
}

std::string peer_serial(const SSL* ssl) {
  FEDCORE_ASSERT(ssl != nullptr, "peer_serial: null SSL");
  X509* cert = SSL_get0_peer_certificate(ssl);
  return cert == nullptr ? std::string() : serial_hex(X509_get0_serialNumber(cert));
}

}  // namespace fedcore::tls
