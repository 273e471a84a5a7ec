// Runs, their rounds and per-client results: reads from the store, control through
// FederationServer (start_run, stop_run, pause_run, resume_run, advance_round).
#include <map>
#include <utility>

#include "server/api/handlers.hpp"
#include "server/federation/run_config.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::api::detail {
namespace {

// Store errors keep their code; not_found gets a message naming the run.
Response run_error(const error& e, std::int64_t run_id) {
  if (e.code == errc::not_found) {
    return error_response(fail(errc::not_found, "run " + std::to_string(run_id) + " not found"));
  }
  return error_response(e);
}

// POST bodies of the control routes take no fields; anything sent must be {}.
result<void> empty_object_body(const Request& req) {
  auto body = json_object_body(req);
  if (!body) {
    return body.error();
  }
  return json_object_keys(*body, JsonPath("body"), {});
}

// The run a control route (stop, next round) acts on: no query parameters, the id from
// the path, and an empty JSON object as the body.
result<std::int64_t> control_target(const Request& req, const PathParams& params) {
  if (auto ok = only_params(req.query, {}); !ok) {
    return ok.error();
  }
  auto id = id_param(params, "id");
  if (!id) {
    return id.error();
  }
  if (auto ok = empty_object_body(req); !ok) {
    return ok.error();
  }
  return *id;
}

}  // namespace

// Every run, newest first (runs are few; the store pages them).
result<std::vector<store::RunRecord>> list_all_runs(store::HistoryStore& store) {
  std::vector<store::RunRecord> out;
  for (std::int64_t offset = 0;; offset += store::kMaxPageSize) {
    auto page = store.list_runs(store::kMaxPageSize, offset);
    if (!page) {
      return page.error();
    }
    out.insert(out.end(), page->begin(), page->end());
    if (static_cast<std::int64_t>(page->size()) < store::kMaxPageSize) {
      return out;
    }
  }
}

void add_run_routes(Router& router, ApiContext& ctx) {
  router.add("POST", "/api/v1/runs",
             [&ctx](const Request& req, const PathParams&) {
               if (auto ok = only_params(req.query, {}); !ok) {
                 return error_response(ok.error());
               }
               auto body = json_object_body(req);
               if (!body) {
                 return error_response(body.error());
               }
               auto config = federation::run_config_from_json(*body);
               if (!config) {
                 return error_response(config.error());
               }
               auto id = ctx.federation.start_run(*config);
               if (!id) {
                 return error_response(id.error());
               }
               auto run = ctx.store.get_run(*id);
               if (!run) {
                 return error_response(run.error());
               }
               auto response = json_reply(201, run_view(ctx, *run));
               response.headers.emplace_back("Location", "/api/v1/runs/" + std::to_string(*id));
               return response;
             },
             {.needs_token = true, .body_limit = kMaxJsonBody});

  router.add("GET", "/api/v1/runs", [&ctx](const Request& req, const PathParams&) {
    if (auto ok = only_params(req.query, {"limit", "offset", "state"}); !ok) {
      return error_response(ok.error());
    }
    auto page = page_params(req.query);
    if (!page) {
      return error_response(page.error());
    }
    auto state = query_param(req.query, "state");
    if (!state) {
      return error_response(state.error());
    }
    std::optional<store::RunState> wanted;
    if (*state) {
      wanted = store::enum_from_name<store::RunState>(store::kRunStateNames, **state);
      if (!wanted) {
        return error_response(fail(errc::invalid_argument,
                                   "state: must be one of pending, running, paused, finished, "
                                   "failed, stopped"));
      }
    }
    auto runs = list_all_runs(ctx.store);
    if (!runs) {
      return error_response(runs.error());
    }
    nlohmann::json all = nlohmann::json::array();
    for (const auto& r : *runs) {
      if (!wanted || r.state == *wanted) {
        all.push_back(run_view(ctx, r));
      }
    }
    return page_response(all, *page);
  });

  router.add("GET", "/api/v1/runs/{id}", [&ctx](const Request& req, const PathParams& params) {
    if (auto ok = only_params(req.query, {}); !ok) {
      return error_response(ok.error());
    }
    auto id = id_param(params, "id");
    if (!id) {
      return error_response(id.error());
    }
    auto run = ctx.store.get_run(*id);
    return run ? json_reply(200, run_view(ctx, *run)) : run_error(run.error(), *id);
  });

  router.add("POST", "/api/v1/runs/{id}/stop",
             [&ctx](const Request& req, const PathParams& params) {
               auto id = control_target(req, params);
               if (!id) {
                 return error_response(id.error());
               }
               if (auto stopped = ctx.federation.stop_run(*id); !stopped) {
                 return run_error(stopped.error(), *id);
               }
               auto run = ctx.store.get_run(*id);
               return run ? json_reply(200, run_view(ctx, *run)) : run_error(run.error(), *id);
             },
             {.needs_token = true, .body_limit = kMaxJsonBody});

  // Pause and resume: the same shape as stop (the run as it now is, or the refusal).
  for (const auto& [verb, control] :
       {std::pair{std::string("pause"), &federation::FederationServer::pause_run},
        std::pair{std::string("resume"), &federation::FederationServer::resume_run}}) {
    // An init-capture: clang before 16 cannot capture a structured binding by name.
    router.add("POST", "/api/v1/runs/{id}/" + verb,
               [&ctx, control = control](const Request& req, const PathParams& params) {
                 auto id = control_target(req, params);
                 if (!id) {
                   return error_response(id.error());
                 }
                 if (auto done = (ctx.federation.*control)(*id); !done) {
                   return run_error(done.error(), *id);
                 }
                 auto run = ctx.store.get_run(*id);
                 return run ? json_reply(200, run_view(ctx, *run)) : run_error(run.error(), *id);
               },
               {.needs_token = true, .body_limit = kMaxJsonBody});
  }

  router.add("POST", "/api/v1/runs/{id}/rounds",
             [&ctx](const Request& req, const PathParams& params) {
               auto id = control_target(req, params);
               if (!id) {
                 return error_response(id.error());
               }
               auto round = ctx.federation.advance_round(*id);
               if (!round) {
                 return run_error(round.error(), *id);
               }
               return json_reply(202, {{"run_id", *id}, {"round", *round}});
             },
             {.needs_token = true, .body_limit = kMaxJsonBody});

  router.add(
      "GET", "/api/v1/runs/{id}/rounds", [&ctx](const Request& req, const PathParams& params) {
        if (auto ok = only_params(req.query, {"limit", "offset"}); !ok) {
          return error_response(ok.error());
        }
        auto id = id_param(params, "id");
        if (!id) {
          return error_response(id.error());
        }
        auto page = page_params(req.query);
        if (!page) {
          return error_response(page.error());
        }
        if (auto run = ctx.store.get_run(*id); !run) {
          return run_error(run.error(), *id);
        }
        auto rounds = ctx.store.list_rounds(*id);
        if (!rounds) {
          return run_error(rounds.error(), *id);
        }
        auto phases = ctx.store.list_round_phases(*id);
        if (!phases) {
          return run_error(phases.error(), *id);
        }
        std::map<std::pair<std::int64_t, std::int64_t>, const store::RoundPhases*> timed;
        for (const auto& p : *phases) {
          timed[{p.round, p.attempt}] = &p;
        }
        nlohmann::json all = nlohmann::json::array();
        for (const auto& r : *rounds) {
          auto view = round_json(r);
          const auto found = timed.find({r.round, r.attempt});
          view["phases"] = found != timed.end() ? phases_json(*found->second) : nlohmann::json();
          all.push_back(std::move(view));
        }
        return page_response(all, *page);
      });

  router.add("GET", "/api/v1/runs/{id}/rounds/{round}/results",
             [&ctx](const Request& req, const PathParams& params) {
               if (auto ok = only_params(req.query, {}); !ok) {
                 return error_response(ok.error());
               }
               auto id = id_param(params, "id");
               if (!id) {
                 return error_response(id.error());
               }
               auto round = id_param(params, "round");
               if (!round) {
                 return error_response(round.error());
               }
               if (auto run = ctx.store.get_run(*id); !run) {
                 return run_error(run.error(), *id);
               }
               auto results = ctx.store.list_client_results(*id, *round);
               if (!results) {
                 if (results.error().code == errc::not_found) {
                   return error_response(
                       fail(errc::not_found, "round " + std::to_string(*round) + " of run " +
                                                 std::to_string(*id) + " not found"));
                 }
                 return error_response(results.error());
               }
               nlohmann::json items = nlohmann::json::array();
               for (const auto& r : *results) {
                 items.push_back(result_json(r));
               }
               return json_reply(200, {{"items", std::move(items)}});
             });
}

}  // namespace fedcore::api::detail
