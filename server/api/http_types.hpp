// The admin API's view of HTTP: a request as the handlers see it and the response they
// return. The network layer (api_server.cpp) translates to and from Boost.Beast, so
// handlers, the router and their tests never include Beast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/util/error.hpp"

namespace fedcore::api {

struct Request {
  std::string method;  // as sent, e.g. "GET"
  std::string path;    // the target up to '?', not yet percent-decoded
  std::string query;   // after '?', without it; empty when absent
  std::string content_type;
  std::string authorization;
  std::string body;
  std::string remote;  // the client's address (set by the network layer)
  std::string caller;  // the token's name once Api has authenticated it; never the token
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  // API answers are never cached; static files may be revalidated.
  bool cacheable = false;
  // The session answers with an event stream (events.hpp) instead of `body`.
  bool event_stream = false;
  // A short JSON object for the audit row of this request (audit.hpp); empty: none.
  std::string audit_detail;
};

// The HTTP status of an error code and the code's name in the error shape
// {"error":{"code","message"}} (docs/api.md). 500 is kept for `internal` (a bug) and codes
// no request should meet; a storage failure (io_error) is 503.
int http_status(errc code) noexcept;
std::string_view http_error_code(errc code) noexcept;

// {"error":{"code":...,"message":...}} with the status that goes with `e.code`.
Response error_response(const error& e);
// The same with an explicit status and code name (405, 413, 415, 431 have no errc).
Response error_response(int status, std::string_view code, std::string_view message);
// A JSON answer; `json_text` is already serialised.
Response json_response(int status, std::string json_text);

// Percent-decodes `text` (and '+' as a space when `plus_is_space`, for query strings).
// Errors: invalid_argument for a '%' not followed by two hex digits.
result<std::string> percent_decode(std::string_view text, bool plus_is_space = false);

// The value of query parameter `name` (decoded), or nothing. Errors: invalid_argument for
// a bad escape, or a parameter given twice.
result<std::optional<std::string>> query_param(std::string_view query, std::string_view name);

// Rejects query parameters other than `allowed` (invalid_argument naming the first).
result<void> only_params(std::string_view query, std::initializer_list<std::string_view> allowed);

// An integer parameter in [low, high], `fallback` when absent. Errors: invalid_argument
// naming the parameter ("limit: must be an integer in [1, 500], got \"x\"").
result<std::int64_t> int_param(std::string_view query, std::string_view name, std::int64_t low,
                               std::int64_t high, std::int64_t fallback);

// Parses a decimal integer in [low, high] (path segments, query values); nothing otherwise.
std::optional<std::int64_t> parse_int(std::string_view text, std::int64_t low, std::int64_t high);

}  // namespace fedcore::api
