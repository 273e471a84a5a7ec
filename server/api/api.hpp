// Api: the admin API as a function from Request to Response (docs/api.md), without the
// network. ApiServer (api_server.hpp) feeds it requests read over HTTPS; tests may call
// it directly.
//
// Order of checks for a request: route lookup (404 for unknown /api/ paths and
// /metrics paths, 405 with Allow for a known path with another method; other paths
// are static files, GET/HEAD only), then the bearer token (401 with
// WWW-Authenticate: Bearer), then the body's media type (415 unless
// application/json when a body is sent), then the handler, which validates every
// parameter and field (400 naming it). Requests that change state (POST) are logged
// with the name of the token that made them, never the token.
//
// Thread safety: none. It calls FederationServer and HistoryStore directly, so it runs
// on the io_context thread that owns both.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "server/api/auth.hpp"
#include "server/api/http_types.hpp"
#include "server/api/metrics.hpp"
#include "server/api/router.hpp"
#include "server/api/static_files.hpp"
#include "server/federation/federation_server.hpp"
#include "server/store/history_store.hpp"

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
};

class Api {
 public:
  Api(ApiContext context, TokenVerifier tokens, StaticFiles files);
  // Handlers hold references into the object: it stays where it was made.
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;

  Response handle(const Request& request);
  // The largest body the request's route takes (0: none; static files take none).
  std::size_t body_limit(std::string_view method, std::string_view raw_path) const;

  const Router& router() const noexcept { return router_; }
  ApiContext& context() noexcept { return context_; }

 private:
  ApiContext context_;
  TokenVerifier tokens_;
  StaticFiles files_;
  Router router_;
};

// The API's version string ("0.1.0").
std::string_view api_version() noexcept;

}  // namespace fedcore::api
