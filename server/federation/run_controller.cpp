#include "server/federation/run_controller.hpp"

#include <algorithm>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/federation/aggregate.hpp"
#include "server/federation/detail/active_run.hpp"
#include "server/federation/round.hpp"
#include "server/federation/round_report.hpp"
#include "server/federation/run_model.hpp"
#include "shared/protocol/frame.hpp"
#include "shared/util/assert.hpp"
#include "shared/util/checksum.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::federation {
namespace {

using json = nlohmann::json;

std::string_view rejection_name_of(const Round& round, const std::string& client_id) {
  for (const auto& o : round.outcomes()) {
    if (o.client_id == client_id && o.rejection) {
      return rejection_name(*o.rejection);
    }
  }
  return "other";
}

}  // namespace

std::string_view run_phase_name(RunPhase phase) noexcept {
  switch (phase) {
    case RunPhase::idle:
      return "idle";
    case RunPhase::learning_schema:
      return "learning_schema";
    case RunPhase::waiting_for_admin:
      return "waiting_for_admin";
    case RunPhase::waiting_for_clients:
      return "waiting_for_clients";
    case RunPhase::collecting_feature_stats:
      return "collecting_feature_stats";
    case RunPhase::in_round:
      return "in_round";
  }
  return "unknown";
}

RunController::RunController(RunEnvironment environment) : env_(std::move(environment)) {}
RunController::~RunController() = default;

void RunController::event(std::string_view kind, std::optional<std::int64_t> run,
                          std::optional<std::int64_t> round, std::string_view client_id,
                          std::string detail_json) {
  env_.events.record(kind, run, round, client_id, std::move(detail_json));
}

store::EventRecord RunController::round_event(std::string_view kind,
                                              std::string detail_json) const {
  store::EventRecord e;
  e.time_ms = env_.clock.wall_ms();
  e.kind = std::string(kind);
  e.run_id = active_->record.id;
  e.round = active_->round->number;
  e.detail_json = std::move(detail_json);
  return e;
}

// ---------------------------------------------------------------- admin requests

result<std::int64_t> RunController::start_run(const RunConfig& config) {
  if (stopping_) {
    return fail(errc::failed_precondition, "the server is shutting down");
  }
  if (active_) {
    return fail(errc::failed_precondition,
                "run " + std::to_string(active_->record.id) + " is still active");
  }
  if (hold_) {
    return fail(errc::failed_precondition, "run " + std::to_string(hold_->run_id) +
                                               " waits for its storage (" + hold_->reason +
                                               "); resume or stop it first");
  }
  const auto now = env_.clock.wall_ms();
  auto run = env_.store.create_run(config.name, to_json_text(config), config.rounds, now);
  if (!run) {
    return run.error();
  }
  if (auto state = env_.store.set_run_state(run->id, store::RunState::running, "", now); !state) {
    return state.error();
  }
  spdlog::info("run {} '{}' started: {} rounds of {}", run->id, config.name, config.rounds,
               config.strategy);
  event("run_started", run->id, std::nullopt, "", to_json_text(config));
  activate(*run, config);
  return run->id;
}

void RunController::activate(const store::RunRecord& record, RunConfig config) {
  ++generation_;
  active_ = std::make_unique<ActiveRun>();
  active_->record = record;
  active_->config = std::move(config);
  active_->wait_deadline = env_.clock.steady() + seconds_to_ms(active_->config.wait_for_clients_s);
}

result<void> RunController::resume_runs() {
  auto runs = env_.store.list_runs(1000, 0);
  if (!runs) {
    return runs.error();
  }
  const auto now = env_.clock.wall_ms();
  for (const auto& run : *runs) {
    if (run.state != store::RunState::running) {
      continue;
    }
    auto config = parse_run_config(run.config_json);
    result<void> marked;
    if (!config) {
      marked = env_.store.set_run_state(run.id, store::RunState::failed,
                                        "stored config unreadable: " + config.error().message, now);
    } else if (active_ || stopping_) {
      marked = env_.store.set_run_state(run.id, store::RunState::paused,
                                        "another run was resumed first", now);
    } else {
      spdlog::info("run {} resumes after round {}", run.id, run.last_round);
      activate(run, std::move(*config));
    }
    if (!marked) {
      return marked.error();
    }
  }
  // A run a full or read-only disk paused resumes by itself, across a restart too.
  hold_paused_for_storage(*runs);
  return {};
}

result<void> RunController::stop_run(std::int64_t run_id) {
  if (active_ && active_->record.id == run_id) {
    // Rounds handed off before the stop have finished: they commit (or a failure holds
    // the run, which the stop then ends).
    settle_pending_commits(0);
  }
  auto run = env_.store.get_run(run_id);
  if (!run) {
    return run.error();
  }
  const bool active = active_ && active_->record.id == run_id;
  if (!active &&
      (run->state == store::RunState::finished || run->state == store::RunState::failed ||
       run->state == store::RunState::stopped)) {
    return fail(errc::failed_precondition, "run " + std::to_string(run_id) +
                                               " has already ended (" +
                                               std::string(store::to_string(run->state)) + ")");
  }
  const std::string why = "stopped by an admin";
  if (auto saved =
          env_.store.set_run_state(run_id, store::RunState::stopped, why, env_.clock.wall_ms());
      !saved) {
    return saved.error();
  }
  if (hold_ && hold_->run_id == run_id) {
    hold_.reset();  // no more probes: the admin has decided
  }
  if (active) {
    if (active_->round) {
      spdlog::info("run {} round {}: abandoned, the run was stopped", run_id,
                   active_->round->number);
    }
    active_.reset();  // the round in flight, if any, is dropped: nothing of it is stored
  }
  spdlog::info("run {} stopped by an admin", run_id);
  event("run_ended", run_id, std::nullopt, "", json{{"state", "stopped"}, {"reason", why}}.dump());
  if (env_.hooks.run_ended) {
    env_.hooks.run_ended(run_id, store::RunState::stopped);
  }
  return {};
}

result<void> RunController::pause_run(std::int64_t run_id) {
  auto run = env_.store.get_run(run_id);
  if (!run) {
    return run.error();
  }
  if (hold_ && hold_->run_id == run_id) {
    return fail(errc::failed_precondition,
                "run " + std::to_string(run_id) + " is already paused: " + hold_->reason);
  }
  if (!active_ || active_->record.id != run_id) {
    return fail(errc::failed_precondition, "run " + std::to_string(run_id) +
                                               " is not the active run (" +
                                               std::string(store::to_string(run->state)) + ")");
  }
  if (active_->round) {
    spdlog::info("run {} round {}: abandoned, the run was paused", run_id, active_->round->number);
  }
  end_run(store::RunState::paused, "paused by an admin");
  return {};
}

result<void> RunController::resume_run(std::int64_t run_id) {
  auto run = env_.store.get_run(run_id);
  if (!run) {
    return run.error();
  }
  const auto name = "run " + std::to_string(run_id);
  if (hold_ && !stopping_) {
    if (hold_->run_id != run_id) {
      return fail(errc::failed_precondition, "run " + std::to_string(hold_->run_id) +
                                                 " waits for its storage; resume or stop it first");
    }
    // A probe now, out of turn: the schedule of the next one stays.
    auto resumed = resume_held_run("admin");
    if (!resumed && hold_) {
      ++hold_->probes;
      hold_->last_probe_error = resumed.error().message;
      return fail(errc::unavailable, name + " waits for its storage, which still refuses writes: " +
                                         resumed.error().message);
    }
    return resumed;
  }
  if (run->state != store::RunState::paused) {
    return fail(errc::failed_precondition,
                name + " is " + std::string(store::to_string(run->state)) + ", not paused");
  }
  if (stopping_) {
    return fail(errc::failed_precondition, "the server is shutting down");
  }
  if (active_) {
    return fail(errc::failed_precondition,
                "run " + std::to_string(active_->record.id) + " is still active");
  }
  auto config = parse_run_config(run->config_json);
  if (!config) {
    return fail(errc::data_loss, name + ": stored config unreadable: " + config.error().message);
  }
  if (auto saved =
          env_.store.set_run_state(run_id, store::RunState::running, "", env_.clock.wall_ms());
      !saved) {
    return saved.error();
  }
  spdlog::info("run {} resumed by an admin after round {}", run_id, run->last_round);
  event("run_resumed", run_id, std::nullopt, "", json{{"after_round", run->last_round}}.dump());
  activate(*run, std::move(*config));
  return {};
}

result<std::int64_t> RunController::advance_round(std::int64_t run_id) {
  auto run = env_.store.get_run(run_id);
  if (!run) {
    return run.error();
  }
  const auto name = "run " + std::to_string(run_id);
  if (!active_ || active_->record.id != run_id) {
    return fail(errc::failed_precondition,
                name + " is not running (" + std::string(store::to_string(run->state)) + ")");
  }
  if (!active_->config.manual) {
    return fail(errc::failed_precondition,
                name +
                    " advances by itself; only runs created with \"manual\": true take "
                    "round requests");
  }
  if (active_->round) {
    return fail(errc::failed_precondition, "round " + std::to_string(active_->round->number) +
                                               " of " + name + " is still in progress");
  }
  if (active_->round_requested) {
    return fail(errc::failed_precondition, "the next round of " + name + " was already requested");
  }
  active_->round_requested = true;
  return run->last_round + 1;
}

void RunController::shutdown() {
  settle_pending_commits(0);  // rounds handed off before the shutdown commit
  stopping_ = true;
  hold_.reset();  // a restart holds it again (resume_runs) or resumes it (still running)
  if (active_ && active_->round) {
    spdlog::info("run {} round {}: abandoned by shutdown; it will be run again after a restart",
                 active_->record.id, active_->round->number);
  }
  active_.reset();  // still `running` in the store: a restart resumes it
}

void RunController::fail_active_run(const std::string& why) {
  if (active_) {
    spdlog::error("run {}: {}", active_->record.id, why);
    end_run(store::RunState::failed, why);
  }
}

void RunController::end_run(store::RunState state, const std::string& why) {
  // Rounds handed off before this end commit first. If one cannot, its failure ends the
  // run (held for its storage); if a hook ended the run, that end stands.
  if (!active_->pending.empty() && !settle_pending_commits(0)) {
    return;
  }
  const auto run_id = active_->record.id;
  active_.reset();
  if (state == store::RunState::finished) {
    spdlog::info("run {} finished", run_id);
  } else {
    spdlog::warn("run {} {}: {}", run_id, store::to_string(state), why);
  }
  if (auto saved = env_.store.set_run_state(run_id, state, why, env_.clock.wall_ms()); !saved) {
    spdlog::error("run {}: could not record state {}: {}", run_id, store::to_string(state),
                  saved.error().message);
  }
  event("run_ended", run_id, std::nullopt, "",
        json{{"state", std::string(store::to_string(state))}, {"reason", why}}.dump());
  if (env_.hooks.run_ended) {
    env_.hooks.run_ended(run_id, state);
  }
}

// ---------------------------------------------------------------- inputs from sessions

void RunController::on_update(const std::string& client_id, const protocol::UpdateReport& report,
                              std::span<const float> params, std::uint64_t bytes,
                              std::span<const float> control, const protocol::StepDecoder* step) {
  // A site late for an earlier round has answered it (stale, below): it is free again.
  still_training_.erase(client_id);
  RoundInFlight* round = active_ && active_->round ? &*active_->round : nullptr;
  if (round != nullptr && round->secure) {
    // A plain update in a secure round would put one client's parameters in the clear
    // on the server: refused and not looked at.
    spdlog::warn(
        "run {} round {}: a plain update from '{}' refused: this round is "
        "secure-aggregated",
        active_->record.id, round->number, client_id);
    event("update_stale", report.run_id, report.round, client_id,
          json{{"reason", "this round is secure-aggregated; plain updates are refused"},
               {"reason_code", "secure_round"}}
              .dump());
    return;
  }
  if (round == nullptr || round->stage != RoundStage::collecting) {
    event("update_stale", report.run_id, report.round, client_id,
          json{{"reason", "no round in progress"},
               {"reason_code", stale_reason_name(StaleReason::no_round)}}
              .dump());
    spdlog::warn("client '{}': update for run {} round {} refused: no round in progress", client_id,
                 report.run_id, report.round);
    return;
  }
  std::string why;
  StaleReason stale_reason = StaleReason::replay;
  const auto verdict =
      round->judge->on_update(client_id, report, params, bytes, &why, &stale_reason, control, step);
  if (verdict != UpdateVerdict::stale) {
    round->timer->update_received();
  }
  const auto run = active_->record.id;
  switch (verdict) {
    case UpdateVerdict::accepted:
      spdlog::info("run {} round {}: update from '{}' accepted ({} samples, loss {:.4f})", run,
                   round->number, client_id, report.samples, report.loss);
      event("update_accepted", run, round->number, client_id,
            json{{"samples", report.samples}, {"bytes", bytes}}.dump());
      break;
    case UpdateVerdict::rejected:
      spdlog::warn("run {} round {}: update from '{}' rejected: {}", run, round->number, client_id,
                   why);
      event("update_rejected", run, round->number, client_id,
            json{{"reason", why}, {"reason_code", rejection_name_of(*round->judge, client_id)}}
                .dump());
      break;
    case UpdateVerdict::stale:
      spdlog::warn("run {} round {}: update from '{}' refused: {}", run, round->number, client_id,
                   why);
      event("update_stale", run, round->number, client_id,
            json{{"reason", why}, {"reason_code", stale_reason_name(stale_reason)}}.dump());
      break;
  }
}

// A selected client that could not train has answered the round (as dropped, with its
// words), so the round closes as soon as everyone answered instead of at the deadline.
void RunController::on_client_error(const std::string& client_id, const std::string& message) {
  if (feature_stats_not_given(client_id, message)) {
    return;
  }
  RoundInFlight* round = active_ && active_->round ? &*active_->round : nullptr;
  if (round != nullptr && round->secure && round->judge->is_selected(client_id) &&
      !round->judge->has_answered(client_id)) {
    // In a secure round a client may refuse at any stage (a neighbour's key that does not
    // verify, too few survivors): it leaves the protocol; the threshold decides the rest.
    spdlog::warn("run {} round {}: client '{}' left the secure aggregation: {}", active_->record.id,
                 round->number, client_id, message);
    round->secure->on_dropped(client_id);
    if (!round->secure->contributed(client_id)) {
      round->judge->on_dropped(client_id, "secure aggregation: " + message);
    }
    event("secure_aggregation_left", active_->record.id, round->number, client_id,
          json{{"reason", message}}.dump());
    return;
  }
  if (round == nullptr || round->stage != RoundStage::collecting ||
      !round->judge->is_selected(client_id) || round->judge->has_answered(client_id)) {
    spdlog::warn("client '{}' reported an error outside its round: {}", client_id, message);
    return;
  }
  spdlog::warn("run {} round {}: client '{}' could not train: {}", active_->record.id,
               round->number, client_id, message);
  round->judge->on_dropped(client_id, "could not train: " + message);
  event("training_failed", active_->record.id, round->number, client_id,
        json{{"reason", message}}.dump());
}

void RunController::on_session_lost(const std::string& client_id, const std::string& reason) {
  still_training_.erase(client_id);
  if (feature_stats_not_given(client_id, "connection lost: " + reason)) {
    return;
  }
  RoundInFlight* round = active_ && active_->round ? &*active_->round : nullptr;
  if (round != nullptr && round->evaluation && round->stage == RoundStage::evaluating) {
    round->evaluation->on_dropped(client_id, "connection lost: " + reason);
    return;  // its training answer was given before the round was aggregated
  }
  if (round != nullptr && round->secure && round->judge->is_selected(client_id)) {
    round->secure->on_dropped(client_id);
    if (!round->secure->contributed(client_id) && !round->judge->has_answered(client_id)) {
      round->judge->on_dropped(client_id, "connection lost during secure aggregation (" +
                                              round->secure->progress_of(client_id) +
                                              "): " + reason);
    }
    return;
  }
  if (round != nullptr && round->stage == RoundStage::collecting &&
      round->judge->is_selected(client_id)) {
    round->judge->on_dropped(client_id, "connection lost: " + reason);
  }
}

void RunController::on_secure_message(const std::string& client_id, const protocol::Frame& frame) {
  RoundInFlight* round = active_ && active_->round ? &*active_->round : nullptr;
  const bool in_secure_stage =
      round != nullptr && round->secure &&
      (round->stage == RoundStage::collecting || round->stage == RoundStage::sharing_keys ||
       round->stage == RoundStage::masking || round->stage == RoundStage::consistency ||
       round->stage == RoundStage::unmasking);
  auto accepted = in_secure_stage ? round->secure->on_message(client_id, frame)
                                  : result<void>(fail(errc::failed_precondition,
                                                      "no secure-aggregated round is in progress"));
  if (!accepted) {
    spdlog::warn("client '{}': {} refused: {}", client_id, protocol::message_type_name(frame.type),
                 accepted.error().message);
    event("secure_message_refused", active_ ? std::optional(active_->record.id) : std::nullopt,
          round ? std::optional(round->number) : std::nullopt, client_id,
          json{{"reason", accepted.error().message},
               {"message", protocol::message_type_name(frame.type)}}
              .dump());
  }
}

// ---------------------------------------------------------------- reading

std::shared_ptr<const std::vector<float>> RunController::round_global() const {
  if (!active_ || !active_->round || !active_->model) {
    return nullptr;
  }
  return active_->model->global;
}

bool RunController::run_active() const noexcept {
  return active_ != nullptr;
}
std::int64_t RunController::active_run_id() const noexcept {
  return active_ ? active_->record.id : 0;
}
RunPhase RunController::phase() const noexcept {
  return active_ ? active_->phase : RunPhase::idle;
}
std::int64_t RunController::active_round() const noexcept {
  return active_ && active_->round ? active_->round->number : 0;
}
std::optional<RoundStage> RunController::round_stage() const noexcept {
  if (active_ && active_->round) {
    return active_->round->stage;
  }
  return std::nullopt;
}
bool RunController::is_training(const std::string& client_id) const {
  if (active_ && active_->round && active_->round->secure) {
    return active_->round->judge->is_selected(client_id) &&
           !active_->round->judge->has_answered(client_id);
  }
  return active_ && active_->round && active_->round->judge &&
         active_->round->judge->is_selected(client_id) &&
         !active_->round->judge->has_answered(client_id);
}

RunController::UploadAllowance RunController::upload_allowance(const std::string& client_id,
                                                               protocol::MessageType type) const {
  UploadAllowance allowance;
  if (type == protocol::MessageType::evaluation) {
    allowance.max_metadata_bytes = kMaxEvaluationMetadata;
  }
  if (!active_ || !active_->model || !active_->model->global) {
    return allowance;  // no run, or no model yet: nobody has anything to upload
  }
  // A masked input carries the weight and up to a few metric words (3 for federated evaluation)
  // beside the parameters; a few words of slack cost nothing.
  constexpr std::uint64_t kExtraWords = 8;
  const std::uint64_t model_bytes = active_->model->global->size() * sizeof(float);
  if (type == protocol::MessageType::update) {
    // A compressed step may be larger than the parameters (top-k above half the entries
    // sends 8 bytes each); the run's own encoding sets the bound then.
    allowance.max_payload_bytes = std::max<std::uint64_t>(
        model_bytes,
        protocol::encoded_size(active_->model->global->size(), active_->config.compression));
    if (active_->model->strategy->wants_control()) {
      allowance.max_payload_bytes = 2 * model_bytes;  // SCAFFOLD: parameters, then the control
    }
  } else if (type == protocol::MessageType::secagg_masked) {
    allowance.max_payload_bytes = model_bytes + kExtraWords * sizeof(std::uint32_t);
  }
  allowance.in_round =
      active_->round && active_->round->judge && active_->round->judge->is_selected(client_id);
  return allowance;
}

}  // namespace fedcore::federation
