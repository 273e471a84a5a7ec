#include "shared/secagg/key_binding.hpp"

#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "shared/util/assert.hpp"
#include "shared/util/openssl_ptr.hpp"

namespace fedcore::secagg {
namespace {

result<std::string> read_text(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(errc::not_found, std::string(what) + " '" + path + "' cannot be read");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

openssl::x509_ptr parse_certificate(std::string_view pem) {
  openssl::bio_ptr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) {
    return nullptr;
  }
  return openssl::x509_ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

std::string pem_fingerprint(std::string_view pem) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  FEDCORE_ASSERT(EVP_Digest(pem.data(), pem.size(), digest, &length, EVP_sha256(), nullptr) == 1,
                 "SHA-256 failed in OpenSSL");
  return std::string(reinterpret_cast<const char*>(digest), length);
}

std::string common_name(X509* certificate) {
  char name[256] = {};
  const int length = X509_NAME_get_text_by_NID(X509_get_subject_name(certificate), NID_commonName,
                                               name, sizeof name);
  return length > 0 ? std::string(name, static_cast<std::size_t>(length)) : std::string();
}

}  // namespace

std::string binding_message(std::int64_t run, std::int64_t round, std::string_view client_id,
                            std::span<const std::uint8_t> cipher_public,
                            std::span<const std::uint8_t> mask_public) {
  return "fedcore-secagg-v1|" + std::to_string(run) + "|" + std::to_string(round) + "|" +
         std::string(client_id) + "|" + to_hex(cipher_public) + "|" + to_hex(mask_public);
}

std::string survivors_message(std::int64_t run, std::int64_t round,
                              std::span<const std::string> survivors) {
  std::string message =
      "fedcore-secagg-survivors-v1|" + std::to_string(run) + "|" + std::to_string(round);
  for (const auto& id : survivors) {
    message += "|" + std::to_string(id.size()) + ":" + id;
  }
  return message;
}

struct Signer::Key {
  openssl::pkey_ptr pkey;
};

Signer::~Signer() = default;

result<std::shared_ptr<const Signer>> Signer::from_files(const std::string& key_pem_path,
                                                         const std::string& certificate_pem_path) {
  auto key_text = read_text(key_pem_path, "the client key");
  if (!key_text) {
    return key_text.error();
  }
  auto certificate = read_text(certificate_pem_path, "the client certificate");
  if (!certificate) {
    return certificate.error();
  }
  openssl::bio_ptr bio(BIO_new_mem_buf(key_text->data(), static_cast<int>(key_text->size())));
  openssl::pkey_ptr pkey(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
                             : nullptr);
  OPENSSL_cleanse(key_text->data(), key_text->size());
  if (!pkey) {
    return fail(errc::invalid_argument, "'" + key_pem_path + "' is not a PEM private key");
  }
  if (!parse_certificate(*certificate)) {
    return fail(errc::invalid_argument, "'" + certificate_pem_path + "' is not a PEM certificate");
  }
  std::shared_ptr<Signer> signer(new Signer());
  signer->key_ = std::make_unique<Key>(Key{std::move(pkey)});
  signer->certificate_pem_ = std::move(*certificate);
  return std::shared_ptr<const Signer>(std::move(signer));
}

Bytes Signer::sign(std::string_view message) const {
  openssl::md_ctx_ptr ctx(EVP_MD_CTX_new());
  std::size_t length = 0;
  FEDCORE_ASSERT(
      ctx && EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key_->pkey.get()) == 1 &&
          EVP_DigestSign(ctx.get(), nullptr, &length,
                         reinterpret_cast<const unsigned char*>(message.data()),
                         message.size()) == 1,
      "cannot set up signing with the client key");
  Bytes signature(length);
  FEDCORE_ASSERT(
      EVP_DigestSign(ctx.get(), signature.data(), &length,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1,
      "signing with the client key failed");
  signature.resize(length);
  return signature;
}

// Verified certificates: SHA-256 of the PEM text -> subject CN, notAfter and the parsed
// public key, so that a hit costs a hash and a signature check, not a PEM parse.
struct TrustAnchor::Cache {
  static constexpr std::size_t kMaxEntries = 4096;
  struct Entry {
    std::string client_id;
    std::time_t not_after = 0;
    std::shared_ptr<EVP_PKEY> key;
  };
  std::mutex mutex;
  std::map<std::string, Entry> verified;
};

TrustAnchor::~TrustAnchor() {
  X509_STORE_free(store_);
}

result<std::shared_ptr<const TrustAnchor>> TrustAnchor::from_file(const std::string& ca_pem_path) {
  auto text = read_text(ca_pem_path, "the CA certificate");
  if (!text) {
    return text.error();
  }
  auto ca = parse_certificate(*text);
  if (!ca) {
    return fail(errc::invalid_argument, "'" + ca_pem_path + "' is not a PEM certificate");
  }
  std::shared_ptr<TrustAnchor> anchor(new TrustAnchor());
  anchor->cache_ = std::make_unique<Cache>();
  anchor->store_ = X509_STORE_new();
  FEDCORE_ASSERT(anchor->store_ != nullptr && X509_STORE_add_cert(anchor->store_, ca.get()) == 1,
                 "cannot build a certificate store");
  X509_STORE_set_flags(anchor->store_, X509_V_FLAG_X509_STRICT);
  return std::shared_ptr<const TrustAnchor>(std::move(anchor));
}

result<void> TrustAnchor::verify(std::string_view certificate_pem, std::string_view client_id,
                                 std::string_view message,
                                 std::span<const std::uint8_t> signature) const {
  const std::string who = "client '" + std::string(client_id) + "'";
  const std::string fingerprint = pem_fingerprint(certificate_pem);
  const std::time_t now = std::time(nullptr);
  std::shared_ptr<EVP_PKEY> key;
  {
    std::lock_guard lock(cache_->mutex);
    const auto hit = cache_->verified.find(fingerprint);
    if (hit != cache_->verified.end() && hit->second.client_id == client_id &&
        now < hit->second.not_after) {
      key = hit->second.key;
    }
  }
  if (!key) {
    auto certificate = parse_certificate(certificate_pem);
    if (!certificate) {
      return fail(errc::permission_denied, who + ": its certificate is not a PEM certificate");
    }
    openssl::store_ctx_ptr ctx(X509_STORE_CTX_new());
    if (!ctx || X509_STORE_CTX_init(ctx.get(), store_, certificate.get(), nullptr) != 1) {
      return fail(errc::internal, "cannot set up certificate verification");
    }
    X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT);
    if (X509_verify_cert(ctx.get()) != 1) {
      return fail(errc::permission_denied,
                  who + ": its certificate does not chain to the federation CA (" +
                      X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())) + ")");
    }
    if (common_name(certificate.get()) != client_id) {
      return fail(errc::permission_denied,
                  who + ": its certificate names '" + common_name(certificate.get()) + "'");
    }
    EVP_PKEY* public_key = X509_get_pubkey(certificate.get());  // a reference of our own
    if (public_key == nullptr) {
      return fail(errc::permission_denied, who + ": its certificate has no usable public key");
    }
    key = std::shared_ptr<EVP_PKEY>(public_key, openssl::Free<&EVP_PKEY_free>{});
    // Remembered until the certificate's notAfter (not at all if it cannot be read).
    std::time_t not_after = now;
    std::tm tm{};
    if (ASN1_TIME_to_tm(X509_get0_notAfter(certificate.get()), &tm) == 1) {
      not_after = timegm(&tm);
    }
    std::lock_guard lock(cache_->mutex);
    if (cache_->verified.size() >= Cache::kMaxEntries) {
      cache_->verified.clear();  // rare: thousands of sites, or churn
    }
    cache_->verified[fingerprint] = {std::string(client_id), not_after, key};
  }
  openssl::md_ctx_ptr md(EVP_MD_CTX_new());
  if (!md || EVP_DigestVerifyInit(md.get(), nullptr, EVP_sha256(), nullptr, key.get()) != 1 ||
      EVP_DigestVerify(md.get(), signature.data(), signature.size(),
                       reinterpret_cast<const unsigned char*>(message.data()),
                       message.size()) != 1) {
    return fail(errc::permission_denied,
                who + ": the signature over its secure-aggregation keys does not verify");
  }
  return {};
}

}  // namespace fedcore::secagg
