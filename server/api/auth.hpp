// Bearer tokens for the admin API (docs/api.md, "Authentication").
//
// A token is 32 random bytes from OpenSSL's RAND_bytes, written as 64 lower-case hex
// digits; it is shown once, when created, and only its SHA-256 (hex) is stored, with a
// name and a creation time, under `api.tokens` of the server config. A request presents
// it as `Authorization: Bearer <token>`; the server hashes what it got and compares the
// hash with every stored one in constant time.
//
// Tokens and their hashes are never logged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "server/api/role.hpp"
#include "shared/util/error.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::api {

// A token of the config file. Config tokens are the bootstrap: they are `admin` tokens
// that never expire unless the entry says otherwise ("role", "expires_ms").
struct TokenEntry {
  std::string name;
  std::string sha256_hex;  // 64 lower-case hex digits
  std::int64_t created_ms = 0;
  Role role = Role::admin;
  std::optional<std::int64_t> expires_ms;  // unset: never expires
};

// SHA-256 of `token` as 64 lower-case hex digits (OpenSSL EVP).
std::string sha256_hex(std::string_view token);

// A fresh token: 32 bytes from RAND_bytes as hex. Errors: internal when the RNG fails.
result<std::string> generate_token();

// Reads the `api.tokens` array of a config ({"name","sha256","created_ms"} objects, name
// 1 to 64 bytes and unique, sha256 64 lower-case hex digits, created_ms an integer >= 0;
// optional "role", "read" or "admin" (default), and "expires_ms", an integer >= 0).
// Errors: invalid_argument naming the entry and key ("server config: 'api.tokens[0].sha256'
// must be 64 lower-case hex digits"), unknown keys included.
result<std::vector<TokenEntry>> tokens_from_json(const nlohmann::json& tokens);
// The same with `at` naming the array.
result<std::vector<TokenEntry>> tokens_from_json(const nlohmann::json& tokens, const JsonPath& at);

// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive,
// surrounding blanks dropped), or nothing when the header is absent, of another scheme or
// empty.
std::optional<std::string_view> bearer_token(std::string_view authorization_header);

// Checks Authorization headers against the config's hashes. Immutable after construction.
// Expiry is not its business (it has no clock): lookup() reports the entry's expires_ms.
class TokenVerifier {
 public:
  explicit TokenVerifier(std::vector<TokenEntry> tokens);

  // The name of the token the header carries, or unauthenticated ("missing bearer
  // token" / "invalid bearer token"; the message never contains the token).
  result<std::string> verify(std::string_view authorization_header) const;

  struct Match {
    std::string name;
    Role role = Role::admin;
    std::optional<std::int64_t> expires_ms;
  };
  // The config entry of `token` (the token itself, not a header), or nothing.
  std::optional<Match> lookup(std::string_view token) const;
  // Whether a config token has this name.
  bool has_name(std::string_view name) const;
  // The config entries, without their hashes, in config order.
  std::vector<TokenEntry> entries() const;

  std::size_t size() const noexcept { return tokens_.size(); }

 private:
  struct Stored {
    TokenEntry entry;                   // sha256_hex cleared: the digest is below
    std::vector<unsigned char> digest;  // 32 bytes, decoded from hex
  };
  std::vector<Stored> tokens_;
};

}  // namespace fedcore::api
