#include "server/api/http_types.hpp"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

namespace fedcore::api {
namespace {

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

// Calls `visit(name, raw_value)` for each "name=value" of a query string; stops early
// when visit returns false.
template <class Visit>
void for_each_param(std::string_view query, Visit visit) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) {
      continue;
    }
    const auto eq = pair.find('=');
    const auto name = pair.substr(0, eq);
    const auto value = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    if (!visit(name, value)) {
      return;
    }
  }
}

}  // namespace

int http_status(errc code) noexcept {
  switch (code) {
    case errc::invalid_argument:
    case errc::out_of_range:
      return 400;
    case errc::unauthenticated:
      return 401;
    case errc::permission_denied:
      return 403;
    case errc::not_found:
      return 404;
    case errc::already_exists:
    case errc::failed_precondition:
    case errc::aborted:
      return 409;
    case errc::resource_exhausted:
      return 413;
    case errc::unavailable:
    // The operating system refused a read or write (a full disk, a read-only or failing
    // device): the request was fine and nothing was changed, and it may succeed once the
    // operator has fixed the storage -- not a bug of the server (500).
    case errc::io_error:
      return 503;
    case errc::deadline_exceeded:
      return 504;
    default:
      return 500;
  }
}

std::string_view http_error_code(errc code) noexcept {
  switch (http_status(code)) {
    case 400:
      return "invalid_argument";
    case 401:
      return "unauthenticated";
    case 403:
      return "permission_denied";
    case 404:
      return "not_found";
    case 409:
      return "conflict";
    case 413:
      return "payload_too_large";
    case 503:
      return "unavailable";
    case 504:
      return "deadline_exceeded";
    default:
      return "internal";
  }
}

Response error_response(int status, std::string_view code, std::string_view message) {
  nlohmann::json body{{"error", {{"code", code}, {"message", message}}}};
  // Messages may quote client input; replace invalid UTF-8 rather than throw.
  return json_response(status, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Response error_response(const error& e) {
  return error_response(http_status(e.code), http_error_code(e.code), e.message);
}

Response json_response(int status, std::string json_text) {
  Response r;
  r.status = status;
  r.body = std::move(json_text);
  return r;
}

result<std::string> percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      const int high = i + 2 < text.size() ? hex_value(text[i + 1]) : -1;
      const int low = i + 2 < text.size() ? hex_value(text[i + 2]) : -1;
      if (high < 0 || low < 0) {
        return fail(errc::invalid_argument,
                    "malformed percent-escape at byte " + std::to_string(i));
      }
      out.push_back(static_cast<char>(high * 16 + low));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

result<std::optional<std::string>> query_param(std::string_view query, std::string_view name) {
  std::optional<std::string> found;
  std::optional<error> problem;
  for_each_param(query, [&](std::string_view key, std::string_view raw) {
    if (key != name) {
      return true;
    }
    if (found) {
      problem = fail(errc::invalid_argument, std::string(name) + ": given more than once");
      return false;
    }
    auto value = percent_decode(raw, true);
    if (!value) {
      problem = fail(errc::invalid_argument, std::string(name) + ": " + value.error().message);
      return false;
    }
    found = std::move(*value);
    return true;
  });
  if (problem) {
    return *problem;
  }
  return found;
}

result<void> only_params(std::string_view query, std::initializer_list<std::string_view> allowed) {
  std::optional<error> problem;
  for_each_param(query, [&](std::string_view key, std::string_view) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string list;
      for (auto a : allowed) {
        list += (list.empty() ? "" : ", ") + std::string(a);
      }
      // The name is echoed back quoted through JSON, never interpreted.
      problem = fail(
          errc::invalid_argument,
          "unknown query parameter '" + std::string(key.substr(0, 64)) + "'" +
              (list.empty() ? std::string(" (this route takes none)") : " (known: " + list + ")"));
      return false;
    }
    return true;
  });
  if (problem) {
    return *problem;
  }
  return {};
}

std::optional<std::int64_t> parse_int(std::string_view text, std::int64_t low, std::int64_t high) {
  std::int64_t value = 0;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < low || value > high) {
    return std::nullopt;
  }
  return value;
}

result<std::int64_t> int_param(std::string_view query, std::string_view name, std::int64_t low,
                               std::int64_t high, std::int64_t fallback) {
  auto raw = query_param(query, name);
  if (!raw) {
    return raw.error();
  }
  if (!*raw) {
    return fallback;
  }
  if (auto value = parse_int(**raw, low, high)) {
    return *value;
  }
  return fail(errc::invalid_argument,
              std::string(name) + ": must be an integer in [" + std::to_string(low) + ", " +
                  std::to_string(high) + "], got " +
                  nlohmann::json(raw->value().substr(0, 64))
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace fedcore::api
