#include "server/api/audit.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/api/handlers.hpp"

namespace fedcore::api {
namespace {

// Paths come from the request line (8 KiB at most); the audit keeps enough to identify
// the route and its ids.
constexpr std::size_t kMaxPath = 512;
constexpr std::size_t kMaxMessage = 300;

std::string detail_of(const Response& response) {
  if (!response.audit_detail.empty()) {
    return response.audit_detail;
  }
  if (response.status < 400) {
    return "{}";
  }
  // A refusal: keep its message, which names what was wrong (never a token: no message of
  // the API echoes the Authorization header).
  const auto body = nlohmann::json::parse(response.body, nullptr, false);
  if (body.is_object() && body.contains("error") && body["error"].is_object() &&
      body["error"].contains("message") && body["error"]["message"].is_string()) {
    auto message = body["error"]["message"].get<std::string>();
    if (message.size() > kMaxMessage) {
      message.resize(kMaxMessage);
    }
    return nlohmann::json{{"error", message}}.dump(-1, ' ', false,
                                                   nlohmann::json::error_handler_t::replace);
  }
  return "{}";
}

}  // namespace

store::AuditRecord audit_row(const Request& req, const Response& response, std::int64_t now_ms) {
  store::AuditRecord row;
  row.time_ms = now_ms;
  row.remote = req.remote;
  row.method = req.method.substr(0, 16);
  row.path = req.path.substr(0, kMaxPath);
  row.status = response.status;
  row.detail_json = detail_of(response);
  return row;
}

void record_audit(store::HistoryStore& store, const store::AuditRecord& row,
                  std::int64_t max_rows) {
  auto id = store.append_audit(row);
  if (!id) {
    spdlog::error("admin API: the audit row of {} {} ({}) was not written: {}", row.method,
                  row.path, row.status, id.error().message);
    return;
  }
  // Ids increase by one per row, so "every n-th id" needs no counter of its own.
  if (max_rows <= 0 || *id % std::min(max_rows, kAuditPruneEvery) != 0) {
    return;
  }
  if (auto pruned = store.prune_audit(max_rows); !pruned) {
    spdlog::error("admin API: the audit trail was not pruned: {}", pruned.error().message);
  } else if (*pruned > 0) {
    spdlog::info("admin API: audit retention removed the {} oldest rows (keeping {})", *pruned,
                 max_rows);
  }
}

nlohmann::json audit_json(const store::AuditRecord& row) {
  auto detail = nlohmann::json::parse(row.detail_json, nullptr, false);
  if (detail.is_discarded()) {
    detail = nlohmann::json::object();
  }
  return {{"id", row.id},
          {"time_ms", row.time_ms},
          {"token_name",
           row.token_name.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.token_name)},
          {"token_id", row.token_id ? nlohmann::json(*row.token_id) : nlohmann::json(nullptr)},
          {"role", row.role.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.role)},
          {"remote", row.remote},
          {"method", row.method},
          {"path", row.path},
          {"status", row.status},
          {"detail", std::move(detail)}};
}

namespace detail {

void add_audit_routes(Router& router, ApiContext& ctx) {
  router.add("GET", "/api/v1/audit",
             [&ctx](const Request& req, const PathParams&) {
               if (auto ok = only_params(req.query, {"limit", "before"}); !ok) {
                 return error_response(ok.error());
               }
               auto limit = int_param(req.query, "limit", 1, 500, 50);
               if (!limit) {
                 return error_response(limit.error());
               }
               // 0 stands for "from the newest": ids start at 1.
               auto before =
                   int_param(req.query, "before", 1, std::numeric_limits<std::int64_t>::max(), 0);
               if (!before) {
                 return error_response(before.error());
               }
               auto rows = ctx.store.list_audit(
                   *before == 0 ? std::nullopt : std::optional<std::int64_t>(*before), *limit);
               if (!rows) {
                 return error_response(rows.error());
               }
               nlohmann::json items = nlohmann::json::array();
               for (const auto& row : *rows) {
                 items.push_back(audit_json(row));
               }
               // A full page may have more behind it; its last id is where the next one starts.
               const bool full = static_cast<std::int64_t>(rows->size()) == *limit;
               return json_reply(200, {{"items", std::move(items)},
                                       {"limit", *limit},
                                       {"next_before", full ? nlohmann::json(rows->back().id)
                                                            : nlohmann::json(nullptr)}});
             },
             {.needs_token = true, .body_limit = 0, .role = Role::admin});
}

}  // namespace detail
}  // namespace fedcore::api
