// The roles of admin API tokens. `read` may call the GET (and HEAD) routes that are not
// reserved to admins; `admin` may call every route. Which role a route needs is decided
// in one place, the route table (router.hpp, RouteOptions::role).
#pragma once

#include <optional>
#include <string_view>

namespace fedcore::api {

enum class Role { read, admin };

constexpr std::string_view to_string(Role role) noexcept {
  return role == Role::admin ? "admin" : "read";
}

// The role named `name` ("read" or "admin"), or nothing.
constexpr std::optional<Role> role_from_name(std::string_view name) noexcept {
  if (name == "read") {
    return Role::read;
  }
  if (name == "admin") {
    return Role::admin;
  }
  return std::nullopt;
}

// Whether a token of role `held` may call a route that needs `needed`.
constexpr bool allows(Role held, Role needed) noexcept {
  return held == Role::admin || needed == Role::read;
}

}  // namespace fedcore::api
