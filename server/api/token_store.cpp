#include "server/api/token_store.hpp"

#include <openssl/crypto.h>

namespace fedcore::api {
namespace {

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) {
    return false;
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '@' || c == '-';
    if (!ok) {
      return false;
    }
  }
  return true;
}

TokenInfo info_of(const store::ApiTokenRecord& r) {
  TokenInfo t;
  t.id = r.id;
  t.name = r.name;
  // The column's CHECK allows only the two names.
  t.role = role_from_name(r.role).value_or(Role::read);
  t.source = "api";
  t.created_ms = r.created_ms;
  t.created_by = r.created_by;
  t.expires_ms = r.expires_ms;
  t.revoked_ms = r.revoked_ms;
  return t;
}

bool expired(const std::optional<std::int64_t>& expires_ms, std::int64_t now_ms) {
  return expires_ms && now_ms >= *expires_ms;
}

}  // namespace

std::string_view to_string(AuthFailure failure) noexcept {
  switch (failure) {
    case AuthFailure::none:
      return "none";
    case AuthFailure::missing:
      return "missing";
    case AuthFailure::unknown:
      return "unknown";
    case AuthFailure::expired:
      return "expired";
    case AuthFailure::revoked:
      return "revoked";
  }
  return "unknown";
}

TokenStore::TokenStore(TokenVerifier config_tokens, store::HistoryStore& store)
    : config_(std::move(config_tokens)), store_(store) {}

result<Authentication> TokenStore::authenticate(std::string_view header, std::int64_t now_ms) {
  Authentication out;
  const auto token = bearer_token(header);
  if (!token) {
    out.failure = AuthFailure::missing;
    return out;
  }
  if (auto match = config_.lookup(*token)) {
    if (expired(match->expires_ms, now_ms)) {
      out.failure = AuthFailure::expired;
      out.token_name = std::move(match->name);
      return out;
    }
    out.identity = Identity{std::move(match->name), match->role, std::nullopt};
    return out;
  }
  // API tokens are found by their hash through the table's unique index. The lookup's
  // timing can tell at most something about the SHA-256 of what was presented, which
  // does not help anyone find a token, so no constant-time scan is needed here.
  auto hash = sha256_hex(*token);
  auto found = store_.find_api_token(hash);
  OPENSSL_cleanse(hash.data(), hash.size());
  if (!found) {
    return found.error();
  }
  if (!found->has_value()) {
    out.failure = AuthFailure::unknown;
    return out;
  }
  const auto& record = **found;
  if (record.revoked_ms) {
    out.failure = AuthFailure::revoked;
    out.token_name = record.name;
    return out;
  }
  if (expired(record.expires_ms, now_ms)) {
    out.failure = AuthFailure::expired;
    out.token_name = record.name;
    return out;
  }
  out.identity = Identity{record.name, role_from_name(record.role).value_or(Role::read), record.id};
  return out;
}

result<CreatedToken> TokenStore::create(const std::string& name, Role role,
                                        std::optional<std::int64_t> expires_in_s,
                                        const std::string& created_by, std::int64_t now_ms) {
  if (!valid_name(name)) {
    return fail(errc::invalid_argument,
                "name: must be 1 to 64 characters of letters, digits, '.', '_', '@' or '-'");
  }
  if (expires_in_s && (*expires_in_s < 1 || *expires_in_s > kMaxTokenLifetimeS)) {
    return fail(errc::invalid_argument, "expires_in_s: must be an integer in [1, " +
                                            std::to_string(kMaxTokenLifetimeS) + "]");
  }
  // The config's names are checked here; the API's by the table's UNIQUE constraint.
  if (config_.has_name(name)) {
    return fail(errc::already_exists, "name: a token named '" + name + "' exists");
  }
  auto token = generate_token();
  if (!token) {
    return token.error();
  }
  store::ApiTokenRecord record;
  record.name = name;
  record.role = std::string(to_string(role));
  record.sha256_hex = sha256_hex(*token);
  record.created_ms = now_ms;
  record.created_by = created_by;
  if (expires_in_s) {
    record.expires_ms = now_ms + *expires_in_s * 1000;
  }
  auto stored = store_.create_api_token(record);
  if (!stored) {
    OPENSSL_cleanse(token->data(), token->size());
    if (stored.error().code == errc::already_exists) {
      return fail(errc::already_exists, "name: a token named '" + name + "' exists");
    }
    return stored.error();
  }
  return CreatedToken{info_of(*stored), std::move(*token)};
}

result<std::vector<TokenInfo>> TokenStore::list() {
  std::vector<TokenInfo> out;
  for (const auto& e : config_.entries()) {
    TokenInfo t;
    t.name = e.name;
    t.role = e.role;
    t.source = "config";
    t.created_ms = e.created_ms;
    t.created_by = "config";
    t.expires_ms = e.expires_ms;
    out.push_back(std::move(t));
  }
  auto stored = store_.list_api_tokens();
  if (!stored) {
    return stored.error();
  }
  for (const auto& r : *stored) {
    out.push_back(info_of(r));
  }
  return out;
}

result<TokenInfo> TokenStore::revoke(std::int64_t id, std::int64_t now_ms) {
  auto revoked = store_.revoke_api_token(id, now_ms);
  if (!revoked) {
    return revoked.error();
  }
  return info_of(*revoked);
}

}  // namespace fedcore::api
