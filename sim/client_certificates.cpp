#include "sim/client_certificates.hpp"

#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <memory>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace fedcore::sim {
namespace {

struct Free {
  void operator()(X509* p) const noexcept { X509_free(p); }
  void operator()(EVP_PKEY* p) const noexcept { EVP_PKEY_free(p); }
  void operator()(BIGNUM* p) const noexcept { BN_free(p); }
  void operator()(X509_EXTENSION* p) const noexcept { X509_EXTENSION_free(p); }
  void operator()(std::FILE* p) const noexcept { std::fclose(p); }
};
template <class T>
using Owned = std::unique_ptr<T, Free>;

error openssl_error(const std::string& what) {
  const unsigned long code = ERR_get_error();
  char text[256] = "no OpenSSL error queued";
  if (code != 0)
    ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return fail(errc::internal, what + ": " + text);
}

result<Owned<std::FILE>> open_file(const std::string& path, const char* mode, int permissions) {
  const int flags = mode[0] == 'r' ? O_RDONLY : (O_WRONLY | O_CREAT | O_TRUNC);
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, permissions);
  if (fd < 0)
    return fail(errc::io_error, "cannot open " + path);
  std::FILE* file = ::fdopen(fd, mode);
  if (file == nullptr) {
    ::close(fd);
    return fail(errc::io_error, "cannot open " + path);
  }
  return Owned<std::FILE>(file);
}

// Adds one extension in the notation of openssl.cnf ("critical,CA:FALSE").
result<void> add_extension(X509* cert, X509V3_CTX& ctx, int nid, const char* value) {
  Owned<X509_EXTENSION> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1)
    return openssl_error(std::string("extension ") + OBJ_nid2sn(nid) + " = " + value);
  return {};
}

result<void> issue_one(const std::string& dir, const std::string& id, int days, X509* ca,
                       EVP_PKEY* ca_key) {
  Owned<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (!key)
    return openssl_error("EC P-256 key for " + id);
  Owned<X509> cert(X509_new());
  Owned<BIGNUM> serial(BN_new());
  if (!cert || !serial || X509_set_version(cert.get(), 2) != 1 ||
      BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), 0) == nullptr ||
      X509_time_adj_ex(X509_getm_notAfter(cert.get()), days, 0, nullptr) == nullptr ||
      X509_set_pubkey(cert.get(), key.get()) != 1 ||
      X509_NAME_add_entry_by_txt(X509_get_subject_name(cert.get()), "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(id.c_str()), -1, -1,
                                 0) != 1 ||
      X509_set_issuer_name(cert.get(), X509_get_subject_name(ca)) != 1) {
    return openssl_error("certificate fields for " + id);
  }
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, ca, cert.get(), nullptr, nullptr, 0);
  for (const auto& [nid, value] :
       {std::pair{NID_basic_constraints, "critical,CA:FALSE"},
        std::pair{NID_key_usage, "critical,digitalSignature"},
        std::pair{NID_ext_key_usage, "clientAuth"}, std::pair{NID_subject_key_identifier, "hash"},
        std::pair{NID_authority_key_identifier, "keyid:always"}}) {
    if (auto ok = add_extension(cert.get(), ctx, nid, value); !ok)
      return ok;
  }
  if (X509_sign(cert.get(), ca_key, EVP_sha256()) == 0)
    return openssl_error("signing the certificate of " + id);
  const std::string base = dir + "/clients/" + id;
  auto key_file = open_file(base + ".key", "w", 0600);
  if (!key_file)
    return key_file.error();
  if (PEM_write_PrivateKey(key_file->get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return openssl_error("writing " + base + ".key");
  auto cert_file = open_file(base + ".pem", "w", 0644);
  if (!cert_file)
    return cert_file.error();
  if (PEM_write_X509(cert_file->get(), cert.get()) != 1)
    return openssl_error("writing " + base + ".pem");
  return {};
}

}  // namespace

result<void> issue_client_certificates(const std::string& dir, const std::vector<std::string>& ids,
                                       int days) {
  auto ca_file = open_file(dir + "/ca.pem", "r", 0);
  auto key_file = open_file(dir + "/ca.key", "r", 0);
  if (!ca_file || !key_file)
    return !ca_file ? ca_file.error() : key_file.error();
  Owned<X509> ca(PEM_read_X509(ca_file->get(), nullptr, nullptr, nullptr));
  if (!ca)
    return openssl_error("reading " + dir + "/ca.pem");
  Owned<EVP_PKEY> ca_key(PEM_read_PrivateKey(key_file->get(), nullptr, nullptr, nullptr));
  if (!ca_key)
    return openssl_error("reading " + dir + "/ca.key (an encrypted CA key is not supported)");
  std::error_code ec;
  std::filesystem::create_directories(dir + "/clients", ec);
  if (ec)
    return fail(errc::io_error, "cannot create " + dir + "/clients: " + ec.message());
  for (const auto& id : ids) {
    if (auto ok = issue_one(dir, id, days, ca.get(), ca_key.get()); !ok)
      return ok;
  }
  return {};
}

}  // namespace fedcore::sim
