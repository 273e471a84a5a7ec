// RunController, federated evaluation (docs/protocol.md, "Federated evaluation"): after a
// round's aggregation the round's participants evaluate the new global model on their own
// test splits, and the round commits with their answers and its weighted mean. The last
// round's model, the run's final one, is evaluated by every client that took part in the
// run. Secure rounds without per-client evaluation learn only the sum of the sites'
// metrics, one round late (record_secure_evaluation).
#include <algorithm>
#include <map>
#include <span>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/federation/detail/active_run.hpp"
#include "server/federation/run_controller.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::federation {
namespace {

using json = nlohmann::json;

// Whose evaluation of a round was what, for the event and the log.
json evaluation_summary(const std::vector<store::ClientEvaluation>& rows) {
  json counts = json::object();
  for (const auto& row : rows) {
    const std::string status(store::to_string(row.status));
    counts[status] = counts.value(status, 0) + 1;
  }
  return counts;
}

}  // namespace

// Due: federated evaluation is on, the run has no DP (its metrics would be outside the
// budget: run_config refuses the combination), a secure run lets sites send their own
// metrics, and the round is an evaluate_every-th one or the last.
bool RunController::evaluation_due() const {
  const auto& run = *active_;
  const auto& config = run.config;
  if (!config.federated_evaluation || config.privacy.dp.mode != protocol::DpMode::none) {
    return false;
  }
  if (config.privacy.secure_aggregation &&
      !config.privacy.secure_aggregation->per_client_evaluation) {
    return false;
  }
  const auto number = run.round->number;
  return number == config.rounds || number % config.evaluate_every == 0;
}

// aggregating -> evaluating: the new global model is produced now (the round commits it
// as is) and sent to the evaluators that are online; the others are recorded offline.
void RunController::begin_evaluation() {
  auto& run = *active_;
  auto& round = *run.round;
  auto& model = *run.model;
  const bool final_model = round.number == run.config.rounds;
  std::vector<std::string> evaluators;
  for (const auto& o : round.judge->outcomes()) {
    if (o.status == ClientStatus::ok) {
      evaluators.push_back(o.client_id);
    }
  }
  if (final_model) {
    // Every client that took part in the run, in any committed round.
    if (auto past = env_.store.run_participants(run.record.id)) {
      evaluators.insert(evaluators.end(), past->begin(), past->end());
    } else {
      spdlog::warn(
          "run {}: the run's earlier participants cannot be read ({}); the final model "
          "is evaluated by the last round's",
          run.record.id, past.error().message);
    }
  }
  std::sort(evaluators.begin(), evaluators.end());
  evaluators.erase(std::unique(evaluators.begin(), evaluators.end()), evaluators.end());
  const auto limit = static_cast<std::size_t>(run.config.evaluation_clients);
  if (!final_model && limit > 0 && evaluators.size() > limit) {
    // Seeded like the round's sampling, so a replayed run asks the same sites.
    Rng rng(run.config.seed * 2862933555777941757ULL + static_cast<std::uint64_t>(round.number) +
            static_cast<std::uint64_t>(run.attempt) * 3037000493ULL);
    rng.shuffle(std::span(evaluators));
    evaluators.resize(limit);
    std::sort(evaluators.begin(), evaluators.end());
  }
  const auto finishing = round.timer->now();
  round.next_global =
      std::make_shared<const std::vector<float>>(model.next_global(model.strategy->finish_round()));
  round.timer->add(&store::RoundPhases::aggregate_ms, finishing);
  round.evaluation_started = round.timer->now();

  std::map<std::string, bool> online;  // id -> answers EVALUATE
  for (const auto& c : env_.sessions.online()) {
    online[c.client_id] = c.evaluates;
  }
  protocol::EvaluateRequest request;
  request.run_id = run.record.id;
  request.round = round.number;
  request.model_spec = model.spec_json;
  request.layout_fingerprint = model.layout.fingerprint_hex();
  request.final_model = final_model;
  request.site_batch_norm = !model.site_ranges.empty();
  request.privacy.secure_aggregation = run.config.privacy.secure_aggregation.has_value();
  request.privacy.dp = run.config.privacy.dp.mode;
  request.scaling = run.scaling.value_or(protocol::FeatureScaling{});
  std::map<std::string, std::string> asked;
  std::vector<std::string> offline;
  std::vector<std::string> unable;
  for (const auto& id : evaluators) {
    const auto session = online.find(id);
    if (session == online.end()) {
      offline.push_back(id);
      continue;
    }
    if (!session->second) {
      unable.push_back(id);  // its HELLO did not announce that it answers EVALUATE
      continue;
    }
    request.nonce = env_.entropy.nonce();
    asked[id] = request.nonce;
    env_.sessions.send(id, protocol::MessageType::evaluate, protocol::to_metadata(request),
                       round.next_global);
  }
  spdlog::info("run {} round {}: {} client(s) asked to evaluate the new {}model, {} offline",
               run.record.id, round.number, asked.size(), final_model ? "(final) " : "",
               offline.size());
  event("evaluation_started", run.record.id, round.number, "",
        json{{"asked", asked.size()}, {"offline", offline.size()}, {"final", final_model}}.dump());
  round.evaluation.emplace(run.record.id, round.number, std::move(asked), offline,
                           run.config.max_samples_per_client);
  for (const auto& id : unable) {
    round.evaluation->not_asked(id, "the client does not announce the '" +
                                        std::string(protocol::kEvaluateCapability) +
                                        "' capability");
  }
  round.deadline = env_.clock.steady() + seconds_to_ms(run.config.evaluation_timeout_s);
  run.move(RoundEvent::evaluation_requested);
}

// evaluating: until everyone asked has answered (an answer, a refusal, a failure, a lost
// session) or the deadline; the silent are then recorded as timed out at commit.
bool RunController::step_evaluation() {
  auto& run = *active_;
  auto& round = *run.round;
  if (round.evaluation->all_answered()) {
    run.move(RoundEvent::evaluated);
  } else if (env_.clock.steady() >= round.deadline) {
    run.move(RoundEvent::deadline_passed);
  } else {
    return false;
  }
  return true;
}

// The round's evaluation rows for the commit, and its weighted mean in the round record.
// Only the evaluating stage says how the new model does: anything an update carried was an
// evaluation of the model the round started from, and is not the round's.
std::vector<store::ClientEvaluation> RunController::take_evaluations(store::RoundRecord& record) {
  auto& run = *active_;
  auto& round = *run.round;
  record.fed_eval_loss.reset();
  record.fed_eval_accuracy.reset();
  if (!round.evaluation) {
    return {};
  }
  auto rows = round.evaluation->close();
  json detail = {{"final", round.number == run.config.rounds},
                 {"statuses", evaluation_summary(rows)}};
  if (const auto mean = round.evaluation->mean()) {
    record.fed_eval_loss = mean->loss;
    record.fed_eval_accuracy = mean->accuracy;
    detail["loss"] = mean->loss;
    detail["accuracy"] = mean->accuracy;
    detail["samples"] = mean->samples;
    spdlog::info(
        "run {} round {}: federated evaluation by {} client(s): accuracy {:.4f}, loss "
        "{:.4f}",
        run.record.id, round.number, mean->clients, mean->accuracy, mean->loss);
  } else {
    spdlog::warn("run {} round {}: no client evaluated the new model", run.record.id, round.number);
  }
  event("round_evaluated", run.record.id, round.number, "", detail.dump());
  return rows;
}

// A secure round's masked sum evaluated the model it started from: the previous round's
// aggregate, whose row gets the means now (round 1's evaluated the initial model, which no
// round row stands for).
void RunController::record_secure_evaluation(
    std::int64_t round, const std::optional<std::pair<double, double>>& evaluation) {
  const auto run_id = active_->record.id;
  if (!evaluation || round <= 1) {
    return;
  }
  const auto [loss, accuracy] = *evaluation;
  if (auto saved = env_.store.set_federated_evaluation(run_id, round - 1, loss, accuracy); !saved) {
    spdlog::warn("run {} round {}: the secure federated evaluation cannot be recorded: {}", run_id,
                 round - 1, saved.error().message);
  }
}

void RunController::on_evaluation(const std::string& client_id, const protocol::Frame& frame) {
  RoundInFlight* round = active_ && active_->round ? &*active_->round : nullptr;
  const bool evaluating =
      round != nullptr && round->stage == RoundStage::evaluating && round->evaluation;
  auto report = protocol::parse_evaluation_report(frame.metadata);
  std::string why;
  bool recorded = false;
  if (!report) {
    why = "malformed evaluation: " + report.error().message;
    if (evaluating && round->evaluation->is_asked(client_id)) {
      // Still the client's answer: the stage need not wait for its deadline.
      round->evaluation->on_dropped(client_id, why, store::EvaluationStatus::failed);
    }
  } else if (!evaluating) {
    why = "no evaluation in progress";
  } else {
    recorded = round->evaluation->on_report(client_id, *report, &why);
  }
  const auto run = active_ ? std::optional(active_->record.id) : std::nullopt;
  const auto number = round ? std::optional(round->number) : std::nullopt;
  if (!recorded) {
    spdlog::warn("client '{}': evaluation refused: {}", client_id, why);
    event("evaluation_refused", run, number, client_id, json{{"reason", why}}.dump());
    return;
  }
  const auto status = protocol::evaluation_status_name(report->status);
  if (report->status == protocol::EvaluationStatus::ok) {
    spdlog::info("run {} round {}: '{}' evaluated the new model: accuracy {:.4f} on {} samples",
                 *run, *number, client_id, report->accuracy, report->samples);
  } else {
    spdlog::warn("run {} round {}: '{}' did not evaluate ({}): {}", *run, *number, client_id,
                 status, report->message);
  }
  event("evaluation_received", run, number, client_id, json{{"status", status}}.dump());
}

}  // namespace fedcore::federation
