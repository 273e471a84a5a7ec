// TLS for the federation: OpenSSL contexts for the server and the clients, configured the
// one way Fedcore allows, and the peer identity the server reads after a handshake.
//
// Every connection is TLS 1.3 with mutual authentication against the federation CA (made by
// certs/fedcore-pki, see certs/README.md): the server presents a certificate for its host
// name, each client one whose subject CN is its client id, and the server refuses revoked
// clients by checking the CA's CRL on every handshake. Nothing here trusts the system's CA
// bundle; the federation CA is the only trust anchor.
//
// Policy applied by both contexts:
//   - TLS 1.3 only; ciphersuites TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384,
//     TLS_CHACHA20_POLY1305_SHA256.
//   - Certificates are verified strictly (X509_V_FLAG_X509_STRICT) and for their purpose:
//     the server accepts only certificates with extendedKeyUsage clientAuth (or none), the
//     client only serverAuth, so a client certificate cannot impersonate the server.
//   - The certificate and private key must belong together.
// Server only:
//   - No session resumption (no tickets, session cache off) and no 0-RTT early data: every
//     connection runs a full handshake, so every connection is checked against the CRL
//     the server currently holds.
//   - CRL checking of the client's certificate (X509_V_FLAG_CRL_CHECK). Fails closed: a
//     client is refused when the CRL lists it, when no CRL from its issuer is loaded, and
//     when the loaded CRL has expired (X509_V_ERR_CRL_HAS_EXPIRED) — so the CRL must be
//     re-issued before its nextUpdate (`fedcore-pki crl`). The CA issues leaf certificates
//     directly; only the leaf is checked against the CRL.
//
// A context is read once, when it is made; to pick up a new CRL or certificate, make a new
// context and use it for new connections (existing connections keep the old one).
//
// Error messages name the file and the role it plays and carry OpenSSL's error strings
// (the thread's OpenSSL error queue is drained into them).
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <string_view>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <openssl/types.h>

#include "shared/util/client_id.hpp"
#include "shared/util/error.hpp"

namespace fedcore::tls {

// The TLS 1.3 ciphersuites both sides offer, in order of preference.
inline constexpr const char* kCipherSuites =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

// The client-id rule (the certificate CN rule of certs/fedcore-pki) lives in util.
using fedcore::is_valid_client_id;
using fedcore::kMaxClientIdLength;

struct ServerTlsConfig {
  std::string ca_file;    // PEM: the federation CA certificate(s); the only trust anchors
  std::string cert_file;  // PEM: the server certificate, optionally followed by its chain
  std::string key_file;   // PEM: the server's private key (unencrypted)
  std::string crl_file;   // PEM: the CA's current CRL
  // true: every client must present a certificate that verifies against ca_file and is not
  // revoked in crl_file (both required). false: clients may connect without a certificate;
  // when ca_file is set, a certificate that a client does present is still verified (and
  // crl_file is then required too), and when ca_file is empty none is asked for.
  bool require_client_cert = true;
};

// Builds the server context described at the top of this file.
// Errors (nothing is half-built; on error no context exists):
//   errc::invalid_argument — a required path is empty, or a file is not valid PEM of the
//     expected kind (no certificate in ca_file, no CRL in crl_file, unreadable key), the
//     key does not match the certificate, or the CRL is not signed by a certificate in
//     ca_file;
//   errc::not_found — a named file does not exist;
//   errc::io_error — a named file exists but cannot be read (permissions);
//   errc::internal — OpenSSL refused a setting (a broken OpenSSL build).
// Thread safety: safe to call concurrently. The returned context may be shared by any
// number of streams on any threads once built.
result<boost::asio::ssl::context> make_server_context(const ServerTlsConfig& config);

struct ClientTlsConfig {
  std::string ca_file;    // PEM: the federation CA certificate(s); the only trust anchors
  std::string cert_file;  // PEM: this client's certificate (CN = client id)
  std::string key_file;   // PEM: this client's private key (unencrypted)
  // The server's host name or IP literal. Required: every stream made from the context
  // checks the server certificate against it even if prepare_client_stream is not
  // called (prepare_client_stream can set another name per stream, and sets SNI).
  std::string server_name;
};

// Builds the client context: TLS 1.3 only, the server verified against ca_file and
// server_name, this client's certificate and key loaded and checked to match.
// Errors: as make_server_context; errc::invalid_argument also for an empty or malformed
// server_name. Thread safety: as make_server_context.
result<boost::asio::ssl::context> make_client_context(const ClientTlsConfig& config);

// Prepares a client stream, before its handshake, for connecting to `server_name` (a DNS
// name or an IPv4/IPv6 literal): sets SNI for names (never for IP literals, RFC 6066) and
// makes verification require that the server certificate's subjectAltName matches the
// name (DNS, wildcards only as a whole left-most label) or the IP address. Replaces the
// name set by make_client_context for this stream.
// Errors: errc::invalid_argument — empty, over-long or malformed server_name;
// errc::internal — OpenSSL refused the setting.
// Thread safety: the stream must not be in use by another thread.
result<void> prepare_client_stream(SSL* stream, const std::string& server_name);
// The same for any stream with native_handle() (net::TlsStream, asio::ssl::stream).
template <class Stream>
result<void> prepare_client_stream(Stream& stream, const std::string& server_name) {
  return prepare_client_stream(stream.native_handle(), server_name);
}

// Live revocation: replaces the server context's trust store with one built afresh from
// config.ca_file and config.crl_file (checked as make_server_context checks them), so every
// handshake from now on sees the current CRL; returns the serials it revokes (uppercase
// hex, as peer_serial gives them) so the caller can close sessions that are now revoked.
// On any error the context keeps its previous store. Errors: as make_server_context;
// failed_precondition when no CA or CRL file is configured.
// Thread safety: call on the thread that runs the context's handshakes.
result<std::set<std::string>> reload_revocations(boost::asio::ssl::context& context,
                                                 const ServerTlsConfig& config);

// The serial of the peer's certificate (uppercase hex), "" when it presented none.
std::string peer_serial(const SSL* ssl);

// The subject CN of the peer's certificate after a successful handshake — on the server,
// the authenticated client id. Pass `stream.native_handle()`. Does not take ownership.
// Errors: errc::unauthenticated — the handshake has not completed, the peer presented no
// certificate, or it did not verify;
// errc::invalid_argument — the certificate has no CN, more than one, or one that is not a
// valid client id (is_valid_client_id).
// Thread safety: the connection must not be in use by another thread.
result<std::string> peer_common_name(const SSL* ssl);

}  // namespace fedcore::tls
