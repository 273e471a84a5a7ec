#include "server/api/api.hpp"

#include <cctype>

#include <spdlog/spdlog.h>

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

}  // namespace

std::string_view api_version() noexcept {
  return FEDCORE_VERSION;
}

Api::Api(ApiContext context, TokenVerifier tokens, StaticFiles files)
    : context_(std::move(context)), tokens_(std::move(tokens)), files_(std::move(files)) {
  detail::add_system_routes(router_, context_);
  detail::add_client_routes(router_, context_);
  detail::add_run_routes(router_, context_);
  detail::add_model_routes(router_, context_);
}

std::size_t Api::body_limit(std::string_view method, std::string_view raw_path) const {
  const auto match = router_.match(method, raw_path);
  return match.kind == Router::Match::Kind::found ? match.route->options.body_limit : 0;
}

Response Api::handle(const Request& req) {
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
  std::string who = "anonymous";
  if (match.route->options.needs_token) {
    auto name = tokens_.verify(req.authorization);
    if (!name) {
      auto r = error_response(name.error());
      r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"fedcore\"");
      return r;
    }
    who = std::move(*name);
  }
  if (!match.bad_param.empty()) {
    return error_response(400, "invalid_argument", match.bad_param + ": malformed percent-escape");
  }
  if (!req.body.empty() && !is_json_media_type(req.content_type)) {
    return error_response(415, "unsupported_media_type", "Content-Type: must be application/json");
  }
  try {
    auto response = (*match.handler)(req, match.params);
    if (req.method != "GET" && req.method != "HEAD") {
      // The audit trail of admin actions (docs/engineering.md S3): who, what, outcome; the
      // token's name only, never the token.
      spdlog::info("admin API: token '{}' {} {} -> {}", who, req.method, req.path, response.status);
    }
    return response;
  } catch (const std::exception& e) {
    spdlog::error("admin API: {} {} failed: {}", req.method, req.path, e.what());
    // A handler bug must not take the connection's session (or the server) with it; the
    // message stays in the server log, the client learns only that it failed.
    return error_response(500, "internal", "internal error");
  }
}

}  // namespace fedcore::api
