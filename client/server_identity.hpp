// The server's identity as the site sees it after the TLS handshake: the SHA-256
// fingerprint of its certificate and the certificate's subject CN, for the site policy's
// "server" check (client/site_policy.hpp). The TLS context has already verified the
// certificate against the federation CA and the host name; this pins it further.
//
// Thread safety: the connection must not be in use by another thread.
#pragma once

#include <string>

#include <openssl/types.h>

#include "client/site_policy.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

// Lowercase hex SHA-256 of the certificate's DER encoding (what `openssl x509 -noout
// -fingerprint -sha256` prints, without colons). Errors: internal when OpenSSL fails.
result<std::string> certificate_sha256(const X509* certificate);

// Reads the identity of the peer of a completed client handshake (`stream.native_handle()`).
// Errors: unauthenticated — no completed handshake, no certificate, or it did not verify;
// invalid_argument — its CN is missing, repeated or not [A-Za-z0-9._-]{1,64};
// internal — OpenSSL failed to digest it.
result<ServerIdentity> read_server_identity(const SSL* ssl);

}  // namespace fedcore::client
