// The cryptographic building blocks of SecAgg+, every one of them from OpenSSL:
//   - X25519 key agreement (AgreementKey) followed by HKDF-SHA256, turning two parties'
//     keys into a 32-byte seed only they know;
//   - AES-256-GCM (seal/open) for the Shamir shares one client sends another through the
//     server, so the server relays them without reading them;
//   - AES-128-CTR as the pseudo-random generator that expands a 32-byte seed (key: its
//     first 16 bytes, initial counter block: the last 16) into a mask of any length
//     (add_masks), streamed in fixed-size blocks so that masking a million-parameter update
//     never holds a second copy of it, and all of a client's masks are added to each block
//     while it is in cache;
//   - random_bytes from OpenSSL's private DRBG for every secret.
// Nothing here is hand-rolled: the functions only choose and label OpenSSL primitives.
//
// Thread safety: the functions are reentrant; an AgreementKey may be used from one
// thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "shared/util/error.hpp"

typedef struct evp_pkey_st EVP_PKEY;

namespace fedcore::secagg {

using Bytes = std::vector<std::uint8_t>;
using Seed = std::array<std::uint8_t, 32>;

inline constexpr std::size_t kPublicKeySize = 32;      // X25519
inline constexpr std::size_t kSealOverhead = 12 + 16;  // GCM nonce + tag

// `count` bytes from OpenSSL's private DRBG. Aborts if OpenSSL cannot produce them (the
// process must not go on with predictable secrets).
Bytes random_bytes(std::size_t count);
Seed random_seed();

// An X25519 key pair.
class AgreementKey {
 public:
  // A fresh key pair. Errors: internal (OpenSSL failed).
  static result<AgreementKey> generate();
  // The key pair of a 32-byte private key (the server rebuilds a dropped client's key
  // from Shamir shares). Errors: invalid_argument for a wrong length.
  static result<AgreementKey> from_private(std::span<const std::uint8_t> private_key);

  Bytes public_key() const;   // 32 bytes
  Bytes private_key() const;  // 32 bytes; a secret

  // HKDF-SHA256(X25519(this, peer), info = `label`) -> 32 bytes. Both sides of a pair get
  // the same seed when they pass the same label. Errors: invalid_argument for a malformed
  // peer key (wrong length, or a low-order point whose shared secret is all zero).
  result<Seed> agree(std::span<const std::uint8_t> peer_public, std::string_view label) const;

 private:
  struct Free {
    void operator()(EVP_PKEY* key) const noexcept;
  };
  explicit AgreementKey(EVP_PKEY* key) : key_(key) {}
  std::unique_ptr<EVP_PKEY, Free> key_;
};

// AES-256-GCM with a random 96-bit nonce: nonce || ciphertext || tag. `aad` is
// authenticated, not encrypted (the sender, receiver and round of a share).
Bytes seal(const Seed& key, std::span<const std::uint8_t> plaintext, std::string_view aad);
// Errors: data_loss when the ciphertext, its tag or the aad does not verify.
result<Bytes> open(const Seed& key, std::span<const std::uint8_t> sealed, std::string_view aad);

enum class MaskSign { add, subtract };

struct MaskStream {
  Seed seed;
  MaskSign sign = MaskSign::add;
};

// The keystreams of several masks read in order, block after block: the first apply()
// adds (or subtracts) words 0..n-1 of every mask, the next one words n.., and so on. Lets
// a caller encode, mask and copy out one cache-sized block at a time.
class MaskStreams {
 public:
  static constexpr std::size_t kBlockWords = 4096;  // 16 KiB of keystream per mask and call

  explicit MaskStreams(std::span<const MaskStream> masks);
  MaskStreams(const MaskStreams&) = delete;
  MaskStreams& operator=(const MaskStreams&) = delete;
  ~MaskStreams();

  // REQUIRES: block.size() <= kBlockWords.
  void apply(std::span<std::uint32_t> block);

 private:
  struct Ciphers;
  std::unique_ptr<Ciphers> ciphers_;
};

// For every mask: v[i] += (or -=) the i-th little-endian 32-bit word of the AES-128-CTR
// keystream of its seed, modulo 2^32. One pass over v in blocks of a few KiB, each block
// receiving every mask.
void add_masks(std::span<std::uint32_t> v, std::span<const MaskStream> masks);
// One mask.
void add_mask(std::span<std::uint32_t> v, const Seed& seed, MaskSign sign);

// Lowercase hex of bytes, and back (errors: invalid_argument naming `what`).
std::string to_hex(std::span<const std::uint8_t> bytes);
result<Bytes> from_hex(std::string_view hex, std::string_view what);

}  // namespace fedcore::secagg
