// Binding a client's SecAgg+ public keys to its certificate identity, so that a server
// relaying keys cannot substitute its own (the man-in-the-middle that leaves Flower's
// SecAgg+ secure only against an honest-but-curious server).
//
// Each client signs "fedcore-secagg-v1|<run>|<round>|<client id>|<hex cipher key>|<hex
// mask key>" with the private key of its TLS client certificate. The server relays the
// signature and the certificate; every receiving client checks that the certificate
// chains to the federation CA it trusts, that its subject CN is the claimed client id
// (identities come from certificates only), and that the signature verifies.
// Revocation is checked where certificates are presented, at the server's TLS handshake.
// A certificate whose chain and name were verified once is remembered (by its SHA-256,
// until its notAfter) so that later rounds only check the signature: chain building was
// two thirds of a site's key-binding cost at 16 neighbours.
//
// Thread safety: const methods are safe from several threads (the cache has a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "shared/secagg/crypto.hpp"
#include "shared/util/error.hpp"

typedef struct x509_store_st X509_STORE;

namespace fedcore::secagg {

// What a client signs for one round's keys.
std::string binding_message(std::int64_t run, std::int64_t round, std::string_view client_id,
                            std::span<const std::uint8_t> cipher_public,
                            std::span<const std::uint8_t> mask_public);

// What a client signs in the consistency check: the round's survivor list U3, each id
// length-prefixed (ids are certificate names and may hold any separator). `survivors`
// must be sorted and without duplicates.
std::string survivors_message(std::int64_t run, std::int64_t round,
                              std::span<const std::string> survivors);

// A client's signing identity: its TLS key and certificate.
class Signer {
 public:
  // Errors: not_found / invalid_argument naming the file.
  static result<std::shared_ptr<const Signer>> from_files(const std::string& key_pem_path,
                                                          const std::string& certificate_pem_path);
  ~Signer();
  // SHA-256 signature with the key (ECDSA or RSA PKCS#1 v1.5, as the key is).
  Bytes sign(std::string_view message) const;
  const std::string& certificate_pem() const noexcept { return certificate_pem_; }

 private:
  Signer() = default;
  struct Key;
  std::unique_ptr<Key> key_;
  std::string certificate_pem_;
};

// The federation CA, as a client trusts it.
class TrustAnchor {
 public:
  // Errors: not_found / invalid_argument naming the file.
  static result<std::shared_ptr<const TrustAnchor>> from_file(const std::string& ca_pem_path);
  ~TrustAnchor();
  // Ok when `certificate_pem` chains to the CA, is valid now, names `client_id` as its
  // subject CN and `signature` verifies over `message` with its key. Errors:
  // permission_denied saying which check failed.
  result<void> verify(std::string_view certificate_pem, std::string_view client_id,
                      std::string_view message, std::span<const std::uint8_t> signature) const;

 private:
  TrustAnchor() = default;
  X509_STORE* store_ = nullptr;
  struct Cache;
  std::unique_ptr<Cache> cache_;
};

}  // namespace fedcore::secagg
