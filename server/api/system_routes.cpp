// Health, server info, metrics, the OpenAPI document and the event stream.
#include "server/api/handlers.hpp"
#include "server/api/openapi.hpp"

namespace fedcore::api::detail {
namespace {

double uptime_s(const ApiContext& ctx) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - ctx.started).count();
}

result<MetricsSnapshot> snapshot(ApiContext& ctx) {
  MetricsSnapshot s;
  s.clients_online = static_cast<std::int64_t>(ctx.federation.online_clients());
  for (auto name : store::kRunStateNames) {
    s.runs_by_state[std::string(name)] = 0;
  }
  auto runs = list_all_runs(ctx.store);
  if (!runs) {
    return runs.error();
  }
  const auto hold = ctx.federation.status().storage_hold;
  if (hold) {
    s.storage_fault = std::string(federation::storage_fault_code(hold->kind));
    s.storage_failed_probes = hold->probes;
  }
  for (const auto& run : *runs) {
    // A run held for its storage is paused, whatever the history could record.
    const auto state = hold && hold->run_id == run.id ? store::RunState::paused : run.state;
    ++s.runs_by_state[std::string(store::to_string(state))];
    auto rounds = ctx.store.list_rounds(run.id);
    if (!rounds) {
      return rounds.error();
    }
    for (const auto& r : *rounds) {
      if (r.state == store::RoundState::committed) {
        ++s.rounds_committed;
        s.round_durations_s.push_back(
            r.finished_ms >= r.started_ms ? double(r.finished_ms - r.started_ms) / 1000.0 : 0.0);
      } else {
        ++s.rounds_failed;
      }
    }
  }
  auto phases = ctx.store.round_phase_totals();
  if (!phases) {
    return phases.error();
  }
  s.phases = *phases;
  const auto traffic = ctx.federation.traffic();
  s.bytes_in = traffic.bytes_in;
  s.bytes_out = traffic.bytes_out;
  s.uptime_s = uptime_s(ctx);
  return s;
}

}  // namespace

void add_system_routes(Router& router, ApiContext& ctx) {
  router.add("GET", "/api/v1/health",
             [](const Request&, const PathParams&) {
               return json_reply(200, {{"status", "ok"}, {"version", api_version()}});
             },
             {.needs_token = false, .body_limit = 0});

  router.add("GET", "/api/v1/info", [&ctx](const Request& req, const PathParams&) {
    if (auto ok = only_params(req.query, {}); !ok) {
      return error_response(ok.error());
    }
    const auto status = ctx.federation.status();
    return json_reply(
        200,
        {{"version", api_version()},
         {"uptime_s", uptime_s(ctx)},
         {"listeners", {{"federation", ctx.federation_listener}, {"api", ctx.api_listener}}},
         {"run_active", status.run_active},
         {"active_run_id", status.active_run_id == 0 ? nlohmann::json(nullptr)
                                                     : nlohmann::json(status.active_run_id)},
         {"active_round",
          status.active_round == 0 ? nlohmann::json(nullptr) : nlohmann::json(status.active_round)},
         {"waiting_for_admin", status.waiting_for_admin},
         {"online_clients", status.online_clients},
         {"storage", status.storage_hold ? storage_hold_json(*status.storage_hold, clock_of(ctx))
                                         : nlohmann::json(nullptr)}});
  });

  router.add("GET", "/api/v1/openapi.json", [](const Request& req, const PathParams&) {
    if (auto ok = only_params(req.query, {}); !ok) {
      return error_response(ok.error());
    }
    return json_response(200, std::string(openapi_document()));
  });

  router.add("GET", "/api/v1/events", [](const Request& req, const PathParams&) {
    if (auto ok = only_params(req.query, {}); !ok) {
      return error_response(ok.error());
    }
    Response r;
    r.content_type = "text/event-stream";
    r.event_stream = true;
    return r;
  });

  router.add("GET", "/metrics", [&ctx](const Request& req, const PathParams&) {
    if (auto ok = only_params(req.query, {}); !ok) {
      return error_response(ok.error());
    }
    auto s = snapshot(ctx);
    if (!s) {
      return error_response(s.error());
    }
    Response r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = render_metrics(*s, ctx.updates);
    return r;
  });
}

}  // namespace fedcore::api::detail
