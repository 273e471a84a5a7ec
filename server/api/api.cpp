#include "server/api/api.hpp"

#include <cctype>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "server/api/audit.hpp"
#include "server/api/handlers.hpp"

namespace fedcore::api {
namespace {

bool is_api_path(std::string_view path) {
  return path == "/api" || path.starts_with("/api/") || path == "/metrics" ||
         path.starts_with("/metrics/");
}

// "application/json" or "application/json; charset=utf-8" (case-insensitive type).
bool is_json_media_type(std::string_view content_type) {
  const auto semicolon = content_type.find(';');
  auto type = content_type.substr(0, semicolon);
  while (!type.empty() && type.back() == ' ') {
    type.remove_suffix(1);
  }
  constexpr std::string_view kJson = "application/json";
  if (type.size() != kJson.size()) {
    return false;
  }
  for (std::size_t i = 0; i < type.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(type[i])) != kJson[i]) {
      return false;
    }
  }
  return true;
}

Response static_file(const StaticFiles& files, const Request& req) {
  if (req.method != "GET" && req.method != "HEAD") {
    auto r = error_response(405, "method_not_allowed",
                            "method " + req.method.substr(0, 16) + " not allowed here");
    r.headers.emplace_back("Allow", "GET, HEAD");
    return r;
  }
  auto file = files.load(req.path);
  if (!file) {
    return error_response(file.error());
  }
  Response r;
  r.content_type = std::move(file->content_type);
  r.body = std::move(file->body);
  r.cacheable = true;
  return r;
}

bool is_reading(std::string_view method) {
  return method == "GET" || method == "HEAD";
}

// The first query parameter that looks like a credential ("token", "access_token", any
// case), or nothing. Such a URL is refused whatever the route: a token in a URL ends up
// in browser history, proxy logs and Referer headers.
std::optional<std::string> credential_in_query(std::string_view query) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    auto pair = query.substr(0, amp);
    auto name = pair.substr(0, pair.find('='));
    std::string lower;
    for (char c : name) {
      lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    if (lower == "token" || lower == "access_token" || lower == "bearer" || lower == "api_token") {
      return lower;
    }
    if (amp == std::string_view::npos) {
      break;
    }
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

const SystemClock kSystemClock;

}  // namespace

namespace detail {

const Clock& clock_of(const ApiContext& context) {
  return context.clock != nullptr ? *context.clock : kSystemClock;
}

}  // namespace detail

std::string_view api_version() noexcept {
  return FEDCORE_VERSION;
}

Api::Api(ApiContext context, TokenVerifier tokens, StaticFiles files, AuthLimits limits)
    : context_(std::move(context)),
      tokens_(std::move(tokens), context_.store),
      limiter_(detail::clock_of(context_), limits),
      files_(std::move(files)) {
  detail::add_system_routes(router_, context_);
  detail::add_client_routes(router_, context_);
  detail::add_run_routes(router_, context_);
  detail::add_evaluation_routes(router_, context_);
  detail::add_model_routes(router_, context_);
  detail::add_token_routes(router_, context_, tokens_);
  detail::add_audit_routes(router_, context_);
}

std::size_t Api::body_limit(std::string_view method, std::string_view raw_path) const {
  const auto match = router_.match(method, raw_path);
  return match.kind == Router::Match::Kind::found ? match.route->options.body_limit : 0;
}

Response Api::handle(const Request& req) {
  if (auto name = credential_in_query(req.query)) {
    // Neither the query nor the value is logged or echoed.
    return error_response(400, "invalid_argument",
                          "query parameter '" + *name +
                              "': tokens are never accepted in a URL; send "
                              "'Authorization: Bearer <token>'");
  }
  const auto match = router_.match(req.method, req.path);
  if (match.kind == Router::Match::Kind::no_such_path) {
    if (is_api_path(req.path)) {
      return error_response(404, "not_found", "no such route");
    }
    return static_file(files_, req);
  }
  if (match.kind == Router::Match::Kind::wrong_method) {
    auto r = error_response(
        405, "method_not_allowed",
        "method " + req.method.substr(0, 16) + " not allowed; allowed: " + match.allow);
    r.headers.emplace_back("Allow", match.allow);
    return r;
  }
  if (!match.route->options.needs_token) {
    return run_handler(req, match);
  }
  return handle_route(req, match);
}

Response Api::handle_route(const Request& req, const Router::Match& match) {
  const auto& clock = detail::clock_of(context_);
  // Refused before the token is even looked at: an address that keeps guessing must not
  // learn whether its next guess is right.
  if (auto wait = limiter_.retry_after(req.remote)) {
    auto r = error_response(429, "too_many_requests",
                            "too many failed authentications from this address; retry in " +
                                std::to_string(wait->count()) + " s");
    r.headers.emplace_back("Retry-After", std::to_string(wait->count()));
    return r;
  }
  auto auth = tokens_.authenticate(req.authorization, clock.wall_ms());
  if (!auth) {
    return error_response(auth.error());
  }
  if (!auth->identity) {
    // One answer for every kind of failure: an unknown, an expired and a revoked token
    // all get "invalid bearer token", so the API does not tell a token holder (or a
    // thief) which tokens exist or once existed. The reason goes to the audit trail only.
    const bool missing = auth->failure == AuthFailure::missing;
    auto r = error_response(
        fail(errc::unauthenticated, missing ? "missing bearer token (Authorization: Bearer <token>)"
                                            : "invalid bearer token"));
    r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"fedcore\"");
    // No credential is not a guess: it is neither counted nor audited (a dashboard
    // before its login would fill the trail).
    if (!missing) {
      limiter_.failed(req.remote);
      auto row = audit_row(req, r, clock.wall_ms());
      nlohmann::json detail{{"reason", to_string(auth->failure)}};
      if (!auth->token_name.empty()) {
        detail["token_name"] = auth->token_name;
      }
      row.detail_json = detail.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      record_audit(context_.store, row, context_.audit_max_rows);
    }
    return r;
  }
  const auto& who = *auth->identity;
  Response response;
  if (!allows(who.role, match.route->role)) {
    response = error_response(
        fail(errc::permission_denied, std::string("this route needs the ") +
                                          std::string(to_string(match.route->role)) +
                                          " role; token '" + who.name + "' has the " +
                                          std::string(to_string(who.role)) + " role"));
  } else {
    Request authenticated = req;
    authenticated.caller = who.name;
    response = run_handler(authenticated, match);
  }
  if (!is_reading(req.method) || response.status == 403) {
    if (!is_reading(req.method)) {
      // Also in the server log: who, what, outcome; the token's name only.
      spdlog::info("admin API: token '{}' {} {} -> {}", who.name, req.method.substr(0, 16),
                   req.path, response.status);
    }
    auto row = audit_row(req, response, clock.wall_ms());
    row.token_name = who.name;
    row.token_id = who.token_id;
    row.role = std::string(to_string(who.role));
    record_audit(context_.store, row, context_.audit_max_rows);
  }
  return response;
}

Response Api::run_handler(const Request& req, const Router::Match& match) {
  if (!match.bad_param.empty()) {
    return error_response(400, "invalid_argument", match.bad_param + ": malformed percent-escape");
  }
  if (!req.body.empty() && !is_json_media_type(req.content_type)) {
    return error_response(415, "unsupported_media_type", "Content-Type: must be application/json");
  }
  try {
    return (*match.handler)(req, match.params);
  } catch (const std::exception& e) {
    spdlog::error("admin API: {} {} failed: {}", req.method.substr(0, 16), req.path, e.what());
    // A handler bug must not take the connection's session (or the server) with it; the
    // message stays in the server log, the client learns only that it failed.
    return error_response(500, "internal", "internal error");
  }
}

}  // namespace fedcore::api
