#include "client/server_identity.hpp"

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "shared/tls/context.hpp"

namespace fedcore::client {

result<std::string> certificate_sha256(const X509* certificate) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (certificate == nullptr || X509_digest(certificate, EVP_sha256(), digest, &length) != 1 ||
      length != 32) {
    return fail(errc::internal, "cannot compute the SHA-256 fingerprint of the certificate");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 0x0f];
  }
  return hex;
}

result<ServerIdentity> read_server_identity(const SSL* ssl) {
  // The CN rule, the handshake and the verification result are checked in one place.
  auto name = tls::peer_common_name(ssl);
  if (!name) {
    return name.error();
  }
  auto fingerprint = certificate_sha256(SSL_get0_peer_certificate(ssl));
  if (!fingerprint) {
    return fingerprint.error();
  }
  return ServerIdentity{std::move(*fingerprint), std::move(*name)};
}

}  // namespace fedcore::client
