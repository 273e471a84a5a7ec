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
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/util/error.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::api {

struct TokenEntry {
  std::string name;
  std::string sha256_hex;  // 64 lower-case hex digits
  std::int64_t created_ms = 0;
};

// SHA-256 of `token` as 64 lower-case hex digits (OpenSSL EVP).
std::string sha256_hex(std::string_view token);

// A fresh token: 32 bytes from RAND_bytes as hex. Errors: internal when the RNG fails.
result<std::string> generate_token();

// Reads the `api.tokens` array of a config ({"name","sha256","created_ms"} objects, name
// 1 to 64 bytes and unique, sha256 64 lower-case hex digits, created_ms an integer >= 0).
// Errors: invalid_argument naming the entry and key ("server config: 'api.tokens[0].sha256'
// must be 64 lower-case hex digits"), unknown keys included.
result<std::vector<TokenEntry>> tokens_from_json(const nlohmann::json& tokens);
// The same with `at` naming the array.
result<std::vector<TokenEntry>> tokens_from_json(const nlohmann::json& tokens, const JsonPath& at);

// Checks Authorization headers against the stored hashes. Immutable after construction.
class TokenVerifier {
 public:
  explicit TokenVerifier(std::vector<TokenEntry> tokens);

  // The name of the token the header carries, or unauthenticated ("missing bearer
  // token" / "invalid bearer token"; the message never contains the token).
  result<std::string> verify(std::string_view authorization_header) const;

  std::size_t size() const noexcept { return tokens_.size(); }

 private:
  struct Stored {
    std::string name;
    std::vector<unsigned char> digest;  // 32 bytes, decoded from hex
  };
  std::vector<Stored> tokens_;
};

}  // namespace fedcore::api
