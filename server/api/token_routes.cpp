// Admin API tokens, live: create (the token is shown once), list (never a hash or a
// token), revoke. Every route is admin-only; the role is set in the route table below.
#include <nlohmann/json.hpp>

#include "server/api/handlers.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::api::detail {
namespace {

nlohmann::json optional_ms(const std::optional<std::int64_t>& ms) {
  return ms ? nlohmann::json(*ms) : nlohmann::json(nullptr);
}

nlohmann::json token_json(const TokenInfo& t) {
  return {{"id", t.id ? nlohmann::json(*t.id) : nlohmann::json(nullptr)},
          {"name", t.name},
          {"role", to_string(t.role)},
          {"source", t.source},
          {"created_ms", t.created_ms},
          {"created_by", t.created_by},
          {"expires_ms", optional_ms(t.expires_ms)},
          {"revoked_ms", optional_ms(t.revoked_ms)}};
}

std::string audit_detail(const TokenInfo& t) {
  return nlohmann::json{{"token_id", t.id ? nlohmann::json(*t.id) : nlohmann::json(nullptr)},
                        {"name", t.name},
                        {"role", to_string(t.role)},
                        {"expires_ms", optional_ms(t.expires_ms)}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

struct NewToken {
  std::string name;
  Role role = Role::read;
  std::optional<std::int64_t> expires_in_s;
};

// {"name", "role", "expires_in_s"?}, strictly.
result<NewToken> new_token_body(const Request& req) {
  auto body = json_object_body(req);
  if (!body) {
    return body.error();
  }
  StrictObject o(*body, JsonPath("body"), {"name", "role", "expires_in_s"});
  for (const char* key : {"name", "role"}) {
    if (o.ok() && !o.has(key)) {
      o.reject(key, "is required");
    }
  }
  NewToken t;
  std::string role;
  o.string("name", t.name, {.min_size = 1, .max_size = 64});
  o.choice("role", role, {"read", "admin"});
  if (o.ok() && o.has("expires_in_s")) {
    std::int64_t seconds = 0;
    o.integer("expires_in_s", seconds, {1, kMaxTokenLifetimeS});
    t.expires_in_s = seconds;
  }
  if (auto ok = o.status(); !ok) {
    return ok.error();
  }
  t.role = role_from_name(role).value_or(Role::read);
  return t;
}

}  // namespace

void add_token_routes(Router& router, ApiContext& ctx, TokenStore& tokens) {
  router.add("POST", "/api/v1/tokens",
             [&ctx, &tokens](const Request& req, const PathParams&) {
               if (auto ok = only_params(req.query, {}); !ok) {
                 return error_response(ok.error());
               }
               auto wanted = new_token_body(req);
               if (!wanted) {
                 return error_response(wanted.error());
               }
               auto created = tokens.create(wanted->name, wanted->role, wanted->expires_in_s,
                                            req.caller.empty() ? std::string("config") : req.caller,
                                            clock_of(ctx).wall_ms());
               if (!created) {
                 return error_response(created.error());
               }
               auto body = token_json(created->info);
               body["token"] = created->token;
               auto response = json_reply(201, body);
               // Shown once: no cache may keep it (API answers are all no-store; said again here
               // for HTTP/1.0 caches).
               response.headers.emplace_back("Pragma", "no-cache");
               response.headers.emplace_back("Location",
                                             "/api/v1/tokens/" + std::to_string(*created->info.id));
               response.audit_detail = audit_detail(created->info);
               return response;
             },
             {.needs_token = true, .body_limit = 4 * 1024, .role = Role::admin});

  router.add("GET", "/api/v1/tokens",
             [&tokens](const Request& req, const PathParams&) {
               if (auto ok = only_params(req.query, {"limit", "offset"}); !ok) {
                 return error_response(ok.error());
               }
               auto page = page_params(req.query);
               if (!page) {
                 return error_response(page.error());
               }
               auto all = tokens.list();
               if (!all) {
                 return error_response(all.error());
               }
               nlohmann::json items = nlohmann::json::array();
               for (const auto& t : *all) {
                 items.push_back(token_json(t));
               }
               return page_response(items, *page);
             },
             {.needs_token = true, .body_limit = 0, .role = Role::admin});

  router.add("DELETE", "/api/v1/tokens/{id}",
             [&ctx, &tokens](const Request& req, const PathParams& params) {
               if (auto ok = only_params(req.query, {}); !ok) {
                 return error_response(ok.error());
               }
               auto id = id_param(params, "id");
               if (!id) {
                 return error_response(id.error());
               }
               auto revoked = tokens.revoke(*id, clock_of(ctx).wall_ms());
               if (!revoked) {
                 return error_response(revoked.error());
               }
               auto response = json_reply(200, token_json(*revoked));
               response.audit_detail = audit_detail(*revoked);
               return response;
             },
             {.needs_token = true, .body_limit = 0, .role = Role::admin});
}

}  // namespace fedcore::api::detail
