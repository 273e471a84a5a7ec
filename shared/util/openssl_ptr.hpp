#pragma once
// Owning pointers for the OpenSSL objects Fedcore's TLS and key-binding code holds, each
// freed by its own *_free. One definition instead of a deleter struct per file.
// Secret material (BIGNUMs of Shamir shares) is not here: it needs BN_clear_free, and its
// owner says so where it is held (shared/secagg/shamir.cpp).
#include <memory>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

namespace fedcore::openssl {

template <auto free_function>
struct Free {
  template <class T>
  void operator()(T* object) const noexcept {
    free_function(object);
  }
};

using bio_ptr = std::unique_ptr<BIO, Free<&BIO_free>>;
using x509_ptr = std::unique_ptr<X509, Free<&X509_free>>;
using crl_ptr = std::unique_ptr<X509_CRL, Free<&X509_CRL_free>>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, Free<&EVP_PKEY_free>>;
using md_ctx_ptr = std::unique_ptr<EVP_MD_CTX, Free<&EVP_MD_CTX_free>>;
using store_ptr = std::unique_ptr<X509_STORE, Free<&X509_STORE_free>>;
using store_ctx_ptr = std::unique_ptr<X509_STORE_CTX, Free<&X509_STORE_CTX_free>>;

}  // namespace fedcore::openssl
