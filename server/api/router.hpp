// Router: (method, path pattern) -> handler, for the admin API.
//
// A pattern is a path of literal segments and `{name}` segments; a `{name}` segment
// matches one non-empty segment, which the handler receives percent-decoded in
// PathParams. Patterns are written exactly as in docs/api.md and the OpenAPI document
// (openapi.hpp), and routes() lists them, so a test can hold the two to each other.
//
// HEAD is answered by every GET route (the session drops the body).
//
// Thread safety: add() before use; match() and routes() are then safe from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api/http_types.hpp"
#include "server/api/role.hpp"

namespace fedcore::api {

using PathParams = std::map<std::string, std::string, std::less<>>;
using Handler = std::function<Response(const Request&, const PathParams&)>;

struct RouteOptions {
  bool needs_token = true;
  // The largest body this route reads; 0 means it takes none. Enforced by the session
  // before the body is read (413).
  std::size_t body_limit = 0;
  // The role a token needs for this route (role.hpp). Absent: `read` for GET, `admin` for
  // every other method, so a new mutating route is admin-only unless it says otherwise.
  std::optional<Role> role = std::nullopt;
};

struct RouteInfo {
  std::string method;
  std::string pattern;
  RouteOptions options;
  Role role = Role::admin;  // options.role, or the default for the method
};

class Router {
 public:
  // REQUIRES: pattern starts with '/', (method, pattern) not added before.
  void add(std::string method, std::string pattern, Handler handler, RouteOptions options = {});

  struct Match {
    enum class Kind { found, no_such_path, wrong_method };
    Kind kind = Kind::no_such_path;
    const RouteInfo* route = nullptr;  // when found
    const Handler* handler = nullptr;  // when found
    PathParams params;                 // when found
    std::string allow;                 // when wrong_method: "GET, HEAD" etc.
    std::string bad_param;             // set when a segment had a malformed escape
  };
  Match match(std::string_view method, std::string_view raw_path) const;

  // Every route, in the order added.
  std::vector<RouteInfo> routes() const;

 private:
  struct Entry {
    RouteInfo info;
    std::vector<std::string> segments;
    Handler handler;
  };
  std::vector<Entry> entries_;
};

}  // namespace fedcore::api
