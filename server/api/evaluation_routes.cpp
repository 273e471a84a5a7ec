// A run's federated evaluation (docs/api.md): per round the sample-weighted mean the round
// committed with and what became of the clients asked, and per round each client's answer.
#include <map>

#include "server/api/handlers.hpp"

namespace fedcore::api::detail {
namespace {

Response not_found_response(const error& e, const std::string& what) {
  if (e.code == errc::not_found) {
    return error_response(fail(errc::not_found, what + " not found"));
  }
  return error_response(e);
}

nlohmann::json evaluation_json(const store::ClientEvaluation& e) {
  return {{"client_id", e.client_id},
          {"status", store::to_string(e.status)},
          {"message", e.message},
          {"loss", number_or_null(e.loss)},
          {"accuracy", number_or_null(e.accuracy)},
          {"samples", e.samples}};
}

// Every status, counted (zeros included, so a chart can stack them).
nlohmann::json status_counts(const std::vector<const store::ClientEvaluation*>& rows) {
  nlohmann::json counts = nlohmann::json::object();
  for (const auto name : store::kEvaluationStatusNames) {
    counts[std::string(name)] = 0;
  }
  for (const auto* row : rows) {
    auto& n = counts[std::string(store::to_string(row->status))];
    n = n.get<std::int64_t>() + 1;
  }
  return counts;
}

}  // namespace

void add_evaluation_routes(Router& router, ApiContext& ctx) {
  router.add(
      "GET", "/api/v1/runs/{id}/evaluation", [&ctx](const Request& req, const PathParams& params) {
        if (auto ok = only_params(req.query, {}); !ok) {
          return error_response(ok.error());
        }
        auto id = id_param(params, "id");
        if (!id) {
          return error_response(id.error());
        }
        const auto what = "run " + std::to_string(*id);
        auto run = ctx.store.get_run(*id);
        if (!run) {
          return not_found_response(run.error(), what);
        }
        auto rounds = ctx.store.list_rounds(*id);
        auto rows = rounds ? ctx.store.list_evaluations(*id)
                           : result<std::vector<store::ClientEvaluation>>(rounds.error());
        if (!rows) {
          return not_found_response(rows.error(), what);
        }
        std::map<std::int64_t, std::vector<const store::ClientEvaluation*>> by_round;
        for (const auto& row : *rows) {
          by_round[row.round].push_back(&row);
        }
        nlohmann::json items = nlohmann::json::array();
        for (const auto& r : *rounds) {
          const auto asked = by_round.find(r.round);
          if (r.state != store::RoundState::committed ||
              (!r.fed_eval_accuracy && asked == by_round.end())) {
            continue;  // not evaluated
          }
          std::int64_t samples = 0;
          std::vector<const store::ClientEvaluation*> clients;
          if (asked != by_round.end()) {
            clients = asked->second;
          }
          for (const auto* c : clients) {
            samples += c->samples;
          }
          items.push_back({{"round", r.round},
                           {"final", r.round == run->rounds_total},
                           {"loss", number_or_null(r.fed_eval_loss)},
                           {"accuracy", number_or_null(r.fed_eval_accuracy)},
                           {"samples", samples},
                           // Secure rounds without per-client evaluation: only sums.
                           {"per_client", !clients.empty()},
                           {"clients", status_counts(clients)}});
        }
        return json_reply(
            200,
            {{"run_id", *id}, {"rounds_total", run->rounds_total}, {"items", std::move(items)}});
      });

  router.add("GET", "/api/v1/runs/{id}/rounds/{round}/evaluation",
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
               auto run = ctx.store.get_run(*id);
               if (!run) {
                 return not_found_response(run.error(), "run " + std::to_string(*id));
               }
               const auto what =
                   "round " + std::to_string(*round) + " of run " + std::to_string(*id);
               auto rounds = ctx.store.list_rounds(*id);
               if (!rounds) {
                 return error_response(rounds.error());
               }
               const store::RoundRecord* committed = nullptr;
               for (const auto& r : *rounds) {
                 if (r.round == *round && r.state == store::RoundState::committed) {
                   committed = &r;
                 }
               }
               if (committed == nullptr) {
                 return error_response(fail(errc::not_found, what + " not found (not committed)"));
               }
               auto rows = ctx.store.list_evaluations(*id, *round);
               if (!rows) {
                 return error_response(rows.error());
               }
               nlohmann::json items = nlohmann::json::array();
               for (const auto& row : *rows) {
                 items.push_back(evaluation_json(row));
               }
               return json_reply(200, {{"run_id", *id},
                                       {"round", *round},
                                       {"final", *round == run->rounds_total},
                                       {"loss", number_or_null(committed->fed_eval_loss)},
                                       {"accuracy", number_or_null(committed->fed_eval_accuracy)},
                                       {"items", std::move(items)}});
             });
}

}  // namespace fedcore::api::detail
