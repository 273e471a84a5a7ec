#include "shared/secagg/crypto.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include "shared/util/assert.hpp"

namespace fedcore::secagg {
namespace {

struct CipherCtx {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  CipherCtx() = default;
  CipherCtx(const CipherCtx&) = delete;
  CipherCtx& operator=(const CipherCtx&) = delete;
  ~CipherCtx() { EVP_CIPHER_CTX_free(ctx); }
};

struct PkeyCtx {
  EVP_PKEY_CTX* ctx;
  ~PkeyCtx() { EVP_PKEY_CTX_free(ctx); }
};

constexpr std::size_t kNonceSize = 12;
constexpr std::size_t kTagSize = 16;

// HKDF-SHA256 without salt (RFC 5869 allows it; the input is a fresh X25519 secret) and
// with the caller's label as info, so that one shared secret yields independent seeds for
// independent purposes.
result<Seed> hkdf(std::span<const std::uint8_t> secret, std::string_view label) {
  PkeyCtx p{EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr)};
  Seed out{};
  std::size_t length = out.size();
  if (p.ctx == nullptr || EVP_PKEY_derive_init(p.ctx) <= 0 ||
      EVP_PKEY_CTX_set_hkdf_md(p.ctx, EVP_sha256()) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_key(p.ctx, secret.data(), static_cast<int>(secret.size())) <= 0 ||
      EVP_PKEY_CTX_add1_hkdf_info(p.ctx, reinterpret_cast<const unsigned char*>(label.data()),
                                  static_cast<int>(label.size())) <= 0 ||
      EVP_PKEY_derive(p.ctx, out.data(), &length) <= 0 || length != out.size()) {
    return fail(errc::internal, "HKDF-SHA256 failed in OpenSSL");
  }
  return out;
}

}  // namespace

Bytes random_bytes(std::size_t count) {
  Bytes out(count);
  // A failing DRBG is not an error to handle: continuing would hand out predictable keys.
  FEDCORE_ASSERT(count == 0 || RAND_priv_bytes(out.data(), static_cast<int>(count)) == 1,
                 "OpenSSL could not produce random bytes");
  return out;
}

Seed random_seed() {
  Seed seed{};
  const auto bytes = random_bytes(seed.size());
  std::copy(bytes.begin(), bytes.end(), seed.begin());
  return seed;
}

void AgreementKey::Free::operator()(EVP_PKEY* key) const noexcept {
  EVP_PKEY_free(key);
}

result<AgreementKey> AgreementKey::generate() {
  EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "X25519");
  if (key == nullptr) {
    return fail(errc::internal, "OpenSSL could not generate an X25519 key");
  }
  return AgreementKey(key);
}

result<AgreementKey> AgreementKey::from_private(std::span<const std::uint8_t> private_key) {
  if (private_key.size() != 32) {
    return fail(errc::invalid_argument,
                "an X25519 private key is 32 bytes, got " + std::to_string(private_key.size()));
  }
  EVP_PKEY* key = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, private_key.data(),
                                               private_key.size());
  if (key == nullptr) {
    return fail(errc::invalid_argument, "OpenSSL refused the X25519 private key");
  }
  return AgreementKey(key);
}

Bytes AgreementKey::public_key() const {
  Bytes out(kPublicKeySize);
  std::size_t length = out.size();
  FEDCORE_ASSERT(
      EVP_PKEY_get_raw_public_key(key_.get(), out.data(), &length) == 1 && length == kPublicKeySize,
      "cannot read an X25519 public key");
  return out;
}

Bytes AgreementKey::private_key() const {
  Bytes out(32);
  std::size_t length = out.size();
  FEDCORE_ASSERT(EVP_PKEY_get_raw_private_key(key_.get(), out.data(), &length) == 1 && length == 32,
                 "cannot read an X25519 private key");
  return out;
}

result<Seed> AgreementKey::agree(std::span<const std::uint8_t> peer_public,
                                 std::string_view label) const {
  if (peer_public.size() != kPublicKeySize) {
    return fail(errc::invalid_argument,
                "an X25519 public key is 32 bytes, got " + std::to_string(peer_public.size()));
  }
  std::unique_ptr<EVP_PKEY, Free> peer(EVP_PKEY_new_raw_public_key(
      EVP_PKEY_X25519, nullptr, peer_public.data(), peer_public.size()));
  if (!peer) {
    return fail(errc::invalid_argument, "OpenSSL refused the peer's X25519 public key");
  }
  PkeyCtx p{EVP_PKEY_CTX_new(key_.get(), nullptr)};
  std::array<std::uint8_t, 32> shared{};
  std::size_t length = shared.size();
  // OpenSSL's X25519 derive fails on an all-zero result (a low-order peer point): a peer
  // that sends such a key would otherwise force a known seed.
  if (p.ctx == nullptr || EVP_PKEY_derive_init(p.ctx) <= 0 ||
      EVP_PKEY_derive_set_peer(p.ctx, peer.get()) <= 0 ||
      EVP_PKEY_derive(p.ctx, shared.data(), &length) <= 0 || length != shared.size()) {
    return fail(errc::invalid_argument, "X25519 key agreement failed (a malformed peer key)");
  }
  auto seed = hkdf(shared, label);
  OPENSSL_cleanse(shared.data(), shared.size());
  return seed;
}

Bytes seal(const Seed& key, std::span<const std::uint8_t> plaintext, std::string_view aad) {
  Bytes out(kNonceSize + plaintext.size() + kTagSize);
  const auto nonce = random_bytes(kNonceSize);
  std::copy(nonce.begin(), nonce.end(), out.begin());
  CipherCtx c;
  int length = 0;
  bool ok =
      c.ctx != nullptr &&
      EVP_EncryptInit_ex(c.ctx, EVP_aes_256_gcm(), nullptr, key.data(), nonce.data()) == 1 &&
      EVP_EncryptUpdate(c.ctx, nullptr, &length, reinterpret_cast<const unsigned char*>(aad.data()),
                        static_cast<int>(aad.size())) == 1 &&
      EVP_EncryptUpdate(c.ctx, out.data() + kNonceSize, &length, plaintext.data(),
                        static_cast<int>(plaintext.size())) == 1 &&
      EVP_EncryptFinal_ex(c.ctx, out.data() + kNonceSize + length, &length) == 1 &&
      EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_GET_TAG, kTagSize,
                          out.data() + kNonceSize + plaintext.size()) == 1;
  FEDCORE_ASSERT(ok, "AES-256-GCM encryption failed in OpenSSL");
  return out;
}

result<Bytes> open(const Seed& key, std::span<const std::uint8_t> sealed, std::string_view aad) {
  if (sealed.size() < kSealOverhead) {
    return fail(errc::data_loss, "a sealed share is shorter than its nonce and tag");
  }
  const std::size_t length = sealed.size() - kSealOverhead;
  Bytes out(length);
  CipherCtx c;
  int written = 0;
  std::array<std::uint8_t, kTagSize> tag{};
  std::copy(sealed.end() - kTagSize, sealed.end(), tag.begin());
  const bool ok =
      c.ctx != nullptr &&
      EVP_DecryptInit_ex(c.ctx, EVP_aes_256_gcm(), nullptr, key.data(), sealed.data()) == 1 &&
      EVP_DecryptUpdate(c.ctx, nullptr, &written,
                        reinterpret_cast<const unsigned char*>(aad.data()),
                        static_cast<int>(aad.size())) == 1 &&
      EVP_DecryptUpdate(c.ctx, out.data(), &written, sealed.data() + kNonceSize,
                        static_cast<int>(length)) == 1 &&
      EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_SET_TAG, kTagSize, tag.data()) == 1 &&
      EVP_DecryptFinal_ex(c.ctx, out.data() + written, &written) == 1;
  if (!ok) {
    return fail(errc::data_loss, "a sealed share did not verify (wrong key, sender or tampered)");
  }
  return out;
}

// 16 KiB of keystream per mask and block: the cost is AES-NI encrypting zeros, the block
// stays in L1/L2 while every mask is added, and memory stays constant whatever the model
// size. AES-128 (10 rounds) rather than AES-256 (14): the seed's 256 bits still choose key
// and counter, and 128-bit keys are the PRG's security level.
struct MaskStreams::Ciphers {
  std::vector<CipherCtx> contexts;
  std::vector<MaskSign> signs;
  std::array<std::uint32_t, kBlockWords> stream{};
};

MaskStreams::MaskStreams(std::span<const MaskStream> masks)
    : ciphers_(std::make_unique<Ciphers>()) {
  ciphers_->contexts = std::vector<CipherCtx>(masks.size());
  for (std::size_t m = 0; m < masks.size(); ++m) {
    const auto& seed = masks[m].seed;
    FEDCORE_ASSERT(ciphers_->contexts[m].ctx != nullptr &&
                       EVP_EncryptInit_ex(ciphers_->contexts[m].ctx, EVP_aes_128_ctr(), nullptr,
                                          seed.data(), seed.data() + 16) == 1,
                   "AES-128-CTR setup failed in OpenSSL");
    ciphers_->signs.push_back(masks[m].sign);
  }
}

MaskStreams::~MaskStreams() {
  if (ciphers_) {
    OPENSSL_cleanse(ciphers_->stream.data(), sizeof(ciphers_->stream));
  }
}

void MaskStreams::apply(std::span<std::uint32_t> block) {
  FEDCORE_ASSERT(block.size() <= kBlockWords, "MaskStreams::apply: block too large");
  static const std::array<std::uint8_t, kBlockWords * 4> zeros{};
  auto& c = *ciphers_;
  const std::size_t words = block.size();
  auto* out = block.data();
  for (std::size_t m = 0; m < c.contexts.size(); ++m) {
    int length = 0;
    FEDCORE_ASSERT(
        EVP_EncryptUpdate(c.contexts[m].ctx, reinterpret_cast<unsigned char*>(c.stream.data()),
                          &length, zeros.data(), static_cast<int>(words * 4)) == 1,
        "AES-128-CTR failed in OpenSSL");
    // Little-endian words on every platform we build for (x86-64); both sides only need
    // to read the keystream the same way.
    const auto* stream = c.stream.data();
    if (c.signs[m] == MaskSign::add) {
      for (std::size_t i = 0; i < words; ++i) {
        out[i] += stream[i];
      }
    } else {
      for (std::size_t i = 0; i < words; ++i) {
        out[i] -= stream[i];
      }
    }
  }
}

void add_masks(std::span<std::uint32_t> v, std::span<const MaskStream> masks) {
  MaskStreams streams(masks);
  for (std::size_t start = 0; start < v.size(); start += MaskStreams::kBlockWords) {
    streams.apply(v.subspan(start, std::min(MaskStreams::kBlockWords, v.size() - start)));
  }
}

void add_mask(std::span<std::uint32_t> v, const Seed& seed, MaskSign sign) {
  const MaskStream one{seed, sign};
  add_masks(v, std::span(&one, 1));
}

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

result<Bytes> from_hex(std::string_view hex, std::string_view what) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') {
      return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
      return c - 'a' + 10;
    }
    return -1;
  };
  if (hex.size() % 2 != 0) {
    return fail(errc::invalid_argument,
                std::string(what) + " must be an even number of hex digits");
  }
  Bytes out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = digit(hex[2 * i]);
    const int lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return fail(errc::invalid_argument, std::string(what) + " must be lowercase hex digits");
    }
    out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return out;
}

}  // namespace fedcore::secagg
