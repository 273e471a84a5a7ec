// The audit trail of the admin API (issue 19): who did what, when, from where, with what
// outcome — one row of the history's audit_log per admin action (every request other
// than GET/HEAD that reaches authentication), per failed authentication with a presented
// token, and per refusal for lack of role. Api (api.cpp) decides when; this file writes
// and reads the rows. GET /api/v1/audit (admin only) lists them newest first.
//
// A row holds the token's name and role, never the token; the path without its query
// string; and a short JSON detail (the handler's Response::audit_detail, or the error
// message of a refusal).
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "server/api/http_types.hpp"
#include "server/store/history_store.hpp"

namespace fedcore::api {

// The audit row of `req` answered with `response` (time, remote, method, path, status,
// detail); the caller fills in who.
store::AuditRecord audit_row(const Request& req, const Response& response, std::int64_t now_ms);

// Appends `row`. A failure is logged, not returned: the action it describes has happened
// and its answer must still reach the client.
//
// Retention: the trail keeps about the newest `max_rows` rows. Failed authentications are
// audited, and anyone can present a bad token, so an unbounded trail would be a way to
// fill the server's disk (rate limits slow that down but do not stop it). Every
// min(max_rows, kAuditPruneEvery)-th row prunes the older ones, so the table never holds
// more than max_rows + min(max_rows, kAuditPruneEvery) - 1 rows. 0 keeps everything.
inline constexpr std::int64_t kAuditPruneEvery = 1000;
void record_audit(store::HistoryStore& store, const store::AuditRecord& row, std::int64_t max_rows);

// The JSON of one row (docs/api.md, "Audit").
nlohmann::json audit_json(const store::AuditRecord& row);

}  // namespace fedcore::api
