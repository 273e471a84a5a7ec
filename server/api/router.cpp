#include "server/api/router.hpp"

#include <algorithm>

#include "shared/util/assert.hpp"

namespace fedcore::api {
namespace {

// "/a/b/" -> {"a", "b", ""}: a trailing slash is a distinct (empty) segment, so
// "/api/v1/runs/" does not silently alias "/api/v1/runs".
std::vector<std::string_view> split(std::string_view path) {
  std::vector<std::string_view> out;
  if (path.empty() || path.front() != '/') {
    return out;
  }
  path.remove_prefix(1);
  while (true) {
    const auto slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) {
      break;
    }
    path.remove_prefix(slash + 1);
  }
  return out;
}

bool is_param(std::string_view segment) {
  return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

}  // namespace

void Router::add(std::string method, std::string pattern, Handler handler, RouteOptions options) {
  FEDCORE_ASSERT(!pattern.empty() && pattern.front() == '/', "route patterns start with '/'");
  for (const auto& e : entries_) {
    FEDCORE_ASSERT(!(e.info.method == method && e.info.pattern == pattern), "duplicate route");
  }
  Entry entry;
  for (auto s : split(pattern)) {
    entry.segments.emplace_back(s);
  }
  // The one place a route's role is settled: reading needs `read`, anything else `admin`.
  const Role role = options.role.value_or(method == "GET" ? Role::read : Role::admin);
  entry.info = RouteInfo{std::move(method), std::move(pattern), options, role};
  entry.handler = std::move(handler);
  entries_.push_back(std::move(entry));
}

Router::Match Router::match(std::string_view method, std::string_view raw_path) const {
  Match result;
  const auto segments = split(raw_path);
  const std::string_view wanted = method == "HEAD" ? std::string_view("GET") : method;
  std::vector<std::string> allowed;
  for (const auto& e : entries_) {
    if (e.segments.size() != segments.size()) {
      continue;
    }
    PathParams params;
    bool same = true;
    for (std::size_t i = 0; i < segments.size() && same; ++i) {
      if (is_param(e.segments[i])) {
        auto decoded = percent_decode(segments[i]);
        if (segments[i].empty()) {
          same = false;
        } else if (!decoded) {
          result.bad_param = e.segments[i].substr(1, e.segments[i].size() - 2);
          decoded = std::string();
        } else {
          params.emplace(e.segments[i].substr(1, e.segments[i].size() - 2), std::move(*decoded));
        }
      } else {
        same = e.segments[i] == segments[i];
      }
    }
    if (!same) {
      result.bad_param.clear();
      continue;
    }
    if (e.info.method == wanted) {
      result.kind = Match::Kind::found;
      result.route = &e.info;
      result.handler = &e.handler;
      result.params = std::move(params);
      return result;
    }
    allowed.push_back(e.info.method);
    if (e.info.method == "GET") {
      allowed.push_back("HEAD");
    }
  }
  if (!allowed.empty()) {
    result.kind = Match::Kind::wrong_method;
    std::sort(allowed.begin(), allowed.end());
    allowed.erase(std::unique(allowed.begin(), allowed.end()), allowed.end());
    for (const auto& m : allowed) {
      result.allow += (result.allow.empty() ? "" : ", ") + m;
    }
  }
  return result;
}

std::vector<RouteInfo> Router::routes() const {
  std::vector<RouteInfo> out;
  for (const auto& e : entries_) {
    out.push_back(e.info);
  }
  return out;
}

}  // namespace fedcore::api
