// GET /api/v1/clients and /api/v1/clients/{id}: the store's client rows joined with the
// live sessions (online, peer, connected_ms, training come from the server, not the
// store, so a client is online exactly while it has a session).
#include "server/api/handlers.hpp"
#include "shared/util/client_id.hpp"

namespace fedcore::api::detail {

void add_client_routes(Router& router, ApiContext& ctx) {
  router.add("GET", "/api/v1/clients", [&ctx](const Request& req, const PathParams&) {
    if (auto ok = only_params(req.query, {"limit", "offset"}); !ok) {
      return error_response(ok.error());
    }
    auto page = page_params(req.query);
    if (!page) {
      return error_response(page.error());
    }
    auto clients = ctx.store.list_clients();
    if (!clients) {
      return error_response(clients.error());
    }
    const auto sessions = ctx.federation.sessions();
    nlohmann::json all = nlohmann::json::array();
    for (const auto& c : *clients) {
      const federation::SessionInfo* session = nullptr;
      for (const auto& s : sessions) {
        if (s.client_id == c.id) {
          session = &s;
        }
      }
      all.push_back(client_json(c, session));
    }
    return page_response(all, *page);
  });

  router.add("GET", "/api/v1/clients/{id}", [&ctx](const Request& req, const PathParams& params) {
    if (auto ok = only_params(req.query, {}); !ok) {
      return error_response(ok.error());
    }
    const auto& id = params.find("id")->second;
    if (!is_valid_client_id(id)) {
      return error_response(fail(errc::invalid_argument, "id: not a valid client id"));
    }
    auto client = ctx.store.get_client(id);
    if (!client) {
      if (client.error().code == errc::not_found) {
        return error_response(fail(errc::not_found, "client '" + id + "' not found"));
      }
      return error_response(client.error());
    }
    const auto sessions = ctx.federation.sessions();
    const federation::SessionInfo* session = nullptr;
    for (const auto& s : sessions) {
      if (s.client_id == id) {
        session = &s;
      }
    }
    return json_reply(200, client_json(*client, session));
  });
}

}  // namespace fedcore::api::detail
