// Internal to fedcore_api: the route tables of each resource, and the JSON views and
// request helpers they share. Shapes are those of docs/api.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/api/api.hpp"
#include "server/api/token_store.hpp"

namespace fedcore::api::detail {

void add_system_routes(Router& router,
                       ApiContext& context);  // health, info, metrics, openapi, events
void add_client_routes(Router& router, ApiContext& context);      // clients
void add_run_routes(Router& router, ApiContext& context);         // runs, rounds, results
void add_evaluation_routes(Router& router, ApiContext& context);  // federated evaluation
void add_model_routes(Router& router, ApiContext& context);       // model download
void add_token_routes(Router& router, ApiContext& context, TokenStore& tokens);  // tokens
void add_audit_routes(Router& router, ApiContext& context);                      // audit

// ---- Views (records -> JSON)

// A finite double, or null (absent or diverged metrics).
nlohmann::json number_or_null(std::optional<double> v);
nlohmann::json client_json(const store::ClientRecord& c, const federation::SessionInfo* session);
nlohmann::json run_json(const store::RunRecord& r);
// run_json, for a run that waits for its storage (federation/storage_fault.hpp) with state
// paused, the hold's reason and a "storage" object; the store may not have been able to
// record the pause.
nlohmann::json run_view(const ApiContext& context, const store::RunRecord& r);
// The hold as JSON: {"run_id","kind","reason","since_ms","recorded","failed_probes",
// "last_probe_error","next_probe_in_s"}.
nlohmann::json storage_hold_json(const federation::StorageHold& hold, const Clock& clock);
nlohmann::json round_json(const store::RoundRecord& r);
// Where a round attempt spent its time (the Round's "phases", docs/api.md).
nlohmann::json phases_json(const store::RoundPhases& p);
nlohmann::json result_json(const store::ClientResult& r);

// ---- Request helpers

struct Page {
  std::int64_t limit = 50;
  std::int64_t offset = 0;
};
// ?limit= (1..500, default 50) and ?offset= (>= 0, default 0).
result<Page> page_params(std::string_view query);
// {"items": items[offset, offset+limit), "total", "limit", "offset"}
Response page_response(const nlohmann::json& all_items, const Page& page);

// A path parameter that must be a positive id ("id: must be a positive integer").
result<std::int64_t> id_param(const PathParams& params, std::string_view name);

// The request body as a JSON object; an empty body is {}. Errors: invalid_argument
// ("body: invalid JSON at byte N", "body: duplicate key 'k'", "body: nested deeper than 64
// levels", "body: must be a JSON object"; shared/util/strict_json.hpp).
result<nlohmann::json> json_object_body(const Request& request);

// A JSON answer (invalid UTF-8 in strings is replaced, never thrown on).
Response json_reply(int status, const nlohmann::json& body);

// Every run in the store, newest first.
result<std::vector<store::RunRecord>> list_all_runs(store::HistoryStore& store);

// Current time in milliseconds since the Unix epoch.
std::int64_t now_ms();

// The context's clock (the system clock unless one was injected).
const Clock& clock_of(const ApiContext& context);

}  // namespace fedcore::api::detail
