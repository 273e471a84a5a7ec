// Api: the admin API as a function from Request to Response (docs/api.md), without the
// network. ApiServer (api_server.hpp) feeds it requests read over HTTPS; tests may call
// it directly.
//
// Order of checks for a request: a token in the query string (400: tokens travel in the
// Authorization header only), route lookup (404 for unknown /api/ paths and /metrics
// paths, 405 with Allow for a known path with another method; other paths are static
// files, GET/HEAD only), then, for routes that need a token: the failed-authentication
// limit of the client's address (429 with Retry-After, auth_limiter.hpp), the bearer
// token (401 with WWW-Authenticate: Bearer; token_store.hpp), the route's role (403;
// router.hpp); then the body's media type (415 unless application/json when a body is
// sent), then the handler, which validates every parameter and field (400 naming it).
//
// Audit (audit.hpp): every request other than GET/HEAD that reaches authentication, every
// failed authentication with a presented token, and every 403 is a row of the audit
// trail, with the token's name, never the token. State-changing requests are also logged
// with the token's name.
//
// Thread safety: none. It calls FederationServer and HistoryStore directly, so it runs
// on the io_context thread that owns both.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "server/api/auth.hpp"
#include "server/api/auth_limiter.hpp"
#include "server/api/http_types.hpp"
#include "server/api/metrics.hpp"
#include "server/api/router.hpp"
#include "server/api/static_files.hpp"
#include "server/api/token_store.hpp"
#include "server/federation/federation_server.hpp"
#include "server/store/history_store.hpp"
#include "shared/util/clock.hpp"

namespace fedcore::api {

// Largest JSON body of any route (POST /api/v1/runs).
inline constexpr std::size_t kMaxJsonBody = 64 * 1024;

// What the handlers reach: the live server, the history, and a little about the process.
struct ApiContext {
  federation::FederationServer& federation;
  store::HistoryStore& store;
  std::string federation_listener;  // "host:port"
  std::string api_listener;         // "host:port", set once the API listens
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  UpdateCounters updates{};  // fed from the event stream by ApiServer
  // Token expiry, audit times and the failed-authentication window; nullptr: the system
  // clock. Must outlive the Api.
  const Clock* clock = nullptr;
  // The audit trail's retention (record_audit in server/api/audit.hpp); 0 keeps every row.
  std::int64_t audit_max_rows = 100'000;
};

class Api {
 public:
  // `tokens`: the config file's tokens (the bootstrap admins); tokens made through the
  // API live in context.store.
  Api(ApiContext context, TokenVerifier tokens, StaticFiles files, AuthLimits limits = {});
  // Handlers hold references into the object: it stays where it was made.
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;

  Response handle(const Request& request);
  // The largest body the request's route takes (0: none; static files take none).
  std::size_t body_limit(std::string_view method, std::string_view raw_path) const;

  const Router& router() const noexcept { return router_; }
  ApiContext& context() noexcept { return context_; }

 private:
  // The request after the route is known: authentication, role, audit, handler.
  Response handle_route(const Request& req, const Router::Match& match);
  Response run_handler(const Request& req, const Router::Match& match);

  ApiContext context_;
  TokenStore tokens_;
  AuthLimiter limiter_;
  StaticFiles files_;
  Router router_;
};

// The API's version string ("0.1.0").
std::string_view api_version() noexcept;

}  // namespace fedcore::api
