// TokenStore: every admin API token, live (issue 19). Two sources:
//   - the config file's `api.tokens` (TokenVerifier): the bootstrap, `admin` tokens that
//     never expire unless their entry says so; they change only with the config file;
//   - tokens made through the API (POST /api/v1/tokens), kept in the history database
//     (HistoryStore::create_api_token) as their SHA-256 only, with a role, an optional
//     expiry and a revocation time. They take effect, and end, at the next request.
//
// A token is shown once, in create()'s answer; nothing here logs or stores it. Names are
// unique across both sources, so an audit row's token name names one token.
//
// Thread safety: none; like the HistoryStore it uses, it belongs to the io_context thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api/auth.hpp"
#include "server/api/role.hpp"
#include "server/store/history_store.hpp"
#include "shared/util/error.hpp"

namespace fedcore::api {

// Who made a request.
struct Identity {
  std::string name;
  Role role = Role::read;
  std::optional<std::int64_t> token_id;  // tokens made through the API
};

// Why an authentication failed. Only the audit trail hears the reason; the client gets
// one generic answer whatever it is.
enum class AuthFailure { none, missing, unknown, expired, revoked };
std::string_view to_string(AuthFailure failure) noexcept;

struct Authentication {
  std::optional<Identity> identity;  // set when failure == none
  AuthFailure failure = AuthFailure::none;
  std::string token_name;  // the matched token's name when expired or revoked
};

// A token as listed: everything but its hash.
struct TokenInfo {
  std::optional<std::int64_t> id;  // nothing for config tokens
  std::string name;
  Role role = Role::admin;
  std::string source;  // "config" or "api"
  std::int64_t created_ms = 0;
  std::string created_by;  // "config" for config tokens
  std::optional<std::int64_t> expires_ms;
  std::optional<std::int64_t> revoked_ms;
};

struct CreatedToken {
  TokenInfo info;
  std::string token;  // shown once
};

// Longest lifetime a token may be given (10 years).
inline constexpr std::int64_t kMaxTokenLifetimeS = 10LL * 365 * 24 * 3600;

class TokenStore {
 public:
  // `store` must outlive the TokenStore.
  TokenStore(TokenVerifier config_tokens, store::HistoryStore& store);

  // The identity the Authorization header carries at now_ms. Errors: only the store's
  // (the database is unreadable); an unknown, expired or revoked token is a failure in
  // the answer, not an error.
  result<Authentication> authenticate(std::string_view authorization_header, std::int64_t now_ms);

  // A new token. name: 1 to 64 bytes of [A-Za-z0-9._@-], not the name of any token made
  // before (config or API, revoked ones included). expires_in_s: 1..kMaxTokenLifetimeS,
  // nothing for never. Errors: invalid_argument naming the field; already_exists (name
  // taken); internal (no randomness); the store's.
  result<CreatedToken> create(const std::string& name, Role role,
                              std::optional<std::int64_t> expires_in_s,
                              const std::string& created_by, std::int64_t now_ms);
  // Config tokens first (config order), then API tokens by id.
  result<std::vector<TokenInfo>> list();
  // Revokes API token `id` (revoking a revoked one changes nothing). Errors: not_found.
  result<TokenInfo> revoke(std::int64_t id, std::int64_t now_ms);

 private:
  TokenVerifier config_;
  store::HistoryStore& store_;
};

}  // namespace fedcore::api
