#include "server/api/auth.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "shared/util/assert.hpp"

namespace fedcore::api {
namespace {

constexpr std::size_t kTokenBytes = 32;
constexpr std::size_t kDigestBytes = 32;

std::string to_hex(const unsigned char* data, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(size * 2, '0');
  for (std::size_t i = 0; i < size; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 0xf];
  }
  return out;
}

std::vector<unsigned char> digest(std::string_view text) {
  std::vector<unsigned char> out(kDigestBytes);
  unsigned int size = 0;
  // EVP_Digest cannot fail for SHA-256 on valid input except on allocation failure,
  // which is not an expected condition.
  const int ok = EVP_Digest(text.data(), text.size(), out.data(), &size, EVP_sha256(), nullptr);
  FEDCORE_ASSERT(ok == 1 && size == kDigestBytes, "EVP_Digest(SHA-256) failed");
  return out;
}

std::optional<std::vector<unsigned char>> from_hex(std::string_view hex) {
  if (hex.size() != kDigestBytes * 2) {
    return std::nullopt;
  }
  std::vector<unsigned char> out(kDigestBytes);
  for (std::size_t i = 0; i < kDigestBytes; ++i) {
    int v = 0;
    for (char c : hex.substr(2 * i, 2)) {
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else {
        return std::nullopt;
      }
    }
    out[i] = static_cast<unsigned char>(v);
  }
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string sha256_hex(std::string_view token) {
  const auto d = digest(token);
  return to_hex(d.data(), d.size());
}

result<std::string> generate_token() {
  std::array<unsigned char, kTokenBytes> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    return fail(errc::internal, "RAND_bytes failed: the system's random source is unavailable");
  }
  auto token = to_hex(bytes.data(), bytes.size());
  OPENSSL_cleanse(bytes.data(), bytes.size());
  return token;
}

result<std::vector<TokenEntry>> tokens_from_json(const nlohmann::json& tokens) {
  return tokens_from_json(tokens, JsonPath("server config", "api.tokens"));
}

result<std::vector<TokenEntry>> tokens_from_json(const nlohmann::json& tokens, const JsonPath& at) {
  if (!tokens.is_array()) {
    return at.bad("must be an array of {\"name\", \"sha256\", \"created_ms\"}, got " +
                  describe_json(tokens));
  }
  std::vector<TokenEntry> out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    StrictObject o(tokens[i], at.index(i), {"name", "sha256", "created_ms", "role", "expires_ms"});
    TokenEntry entry;
    for (const char* key : {"name", "sha256"}) {
      if (o.ok() && !o.has(key)) {
        o.reject(key, "is required");
      }
    }
    o.string("name", entry.name, {.min_size = 1, .max_size = 64});
    o.string("sha256", entry.sha256_hex, {.max_size = 128});
    if (o.ok() && !from_hex(entry.sha256_hex)) {
      o.reject("sha256", "must be 64 lower-case hex digits (a SHA-256)");
    }
    o.integer("created_ms", entry.created_ms, {0, std::numeric_limits<std::int64_t>::max()});
    if (o.ok() && o.has("role")) {
      std::string role;
      o.choice("role", role, {"read", "admin"});
      entry.role = role_from_name(role).value_or(Role::admin);
    }
    if (o.ok() && o.has("expires_ms")) {
      std::int64_t expires = 0;
      o.integer("expires_ms", expires, {0, std::numeric_limits<std::int64_t>::max()});
      entry.expires_ms = expires;
    }
    // The audit trail names a request's token: two tokens of one name are indistinguishable.
    for (const auto& earlier : out) {
      if (o.ok() && earlier.name == entry.name) {
        o.reject("name", "repeats the name of an earlier token, '" + entry.name + "'");
      }
    }
    if (auto done = o.status(); !done) {
      return done.error();
    }
    out.push_back(std::move(entry));
  }
  return out;
}

std::optional<std::string_view> bearer_token(std::string_view header) {
  constexpr std::string_view kScheme = "Bearer ";
  if (header.size() <= kScheme.size() || !iequals(header.substr(0, kScheme.size()), kScheme)) {
    return std::nullopt;
  }
  auto token = header.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') {
    token.remove_prefix(1);
  }
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) {
    token.remove_suffix(1);
  }
  if (token.empty()) {
    return std::nullopt;
  }
  return token;
}

TokenVerifier::TokenVerifier(std::vector<TokenEntry> tokens) {
  for (auto& t : tokens) {
    auto d = from_hex(t.sha256_hex);
    FEDCORE_ASSERT(d.has_value(), "token hashes are validated by tokens_from_json");
    t.sha256_hex.clear();
    tokens_.push_back(Stored{std::move(t), std::move(*d)});
  }
}

std::optional<TokenVerifier::Match> TokenVerifier::lookup(std::string_view token) const {
  const auto presented = digest(token);
  // Every stored hash is compared, in constant time each, so the time taken does not
  // depend on which (if any) matched.
  const Stored* matched = nullptr;
  for (const auto& t : tokens_) {
    if (CRYPTO_memcmp(t.digest.data(), presented.data(), kDigestBytes) == 0) {
      matched = &t;
    }
  }
  if (matched == nullptr) {
    return std::nullopt;
  }
  return Match{matched->entry.name, matched->entry.role, matched->entry.expires_ms};
}

bool TokenVerifier::has_name(std::string_view name) const {
  return std::any_of(tokens_.begin(), tokens_.end(),
                     [&](const Stored& t) { return t.entry.name == name; });
}

std::vector<TokenEntry> TokenVerifier::entries() const {
  std::vector<TokenEntry> out;
  for (const auto& t : tokens_) {
    out.push_back(t.entry);
  }
  return out;
}

result<std::string> TokenVerifier::verify(std::string_view header) const {
  const auto token = bearer_token(header);
  if (!token) {
    return fail(errc::unauthenticated, "missing bearer token (Authorization: Bearer <token>)");
  }
  auto matched = lookup(*token);
  if (!matched) {
    return fail(errc::unauthenticated, "invalid bearer token");
  }
  return std::move(matched->name);
}

}  // namespace fedcore::api
