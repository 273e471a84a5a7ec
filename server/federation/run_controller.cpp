#include "federation/run_controller.hpp"

#include <algorithm>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "federation/aggregate.hpp"
#include "federation/round.hpp"
#include "federation/round_report.hpp"
#include "federation/run_model.hpp"
#include "protocol/frame.hpp"
#include "util/assert.hpp"
#include "util/checksum.hpp"
#include "util/rng.hpp"

namespace fedcore::server {
namespace {

using json = nlohmann::json;

std::chrono::milliseconds seconds_to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

std::string rejection_code_of(const Round& round, const std::string& client_id) {
  for (const auto& o : round.outcomes()) {
    if (o.client_id == client_id) {
      return o.reason_code;
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
    case RunPhase::in_round:
      return "in_round";
  }
  return "unknown";
}

// One round between selecting and done/failed.
struct RoundInFlight {
  std::int64_t number = 0;
  RoundStage stage = RoundStage::selecting;
  std::int64_t started_ms = 0;
  Clock::steady_time deadline;
  std::optional<Round> judge;  // from training on
  RoundClose closed;           // from aggregating on
};

struct RunController::ActiveRun {
  store::RunRecord record;
  RunConfig config;
  RunPhase phase = RunPhase::learning_schema;
  std::optional<RunModel> model;  // once the schema is known
  Clock::steady_time wait_deadline;
  std::int32_t attempt = 0;      // failed attempts at the current round number
  bool round_requested = false;  // manual runs: from advance_round() to the round's close
  std::optional<RoundInFlight> round;

  void move(RoundEvent event) {
    FEDCORE_ASSERT(round.has_value(), "round event without a round");
    const auto next = next_stage(round->stage, event);
    FEDCORE_ASSERT(next.has_value(), "round event not allowed in this stage");
    round->stage = *next;
  }
};

RunController::RunController(RunEnvironment environment) : env_(std::move(environment)) {}
RunController::~RunController() = default;

void RunController::event(std::string_view kind, std::optional<std::int64_t> run,
                          std::optional<std::int64_t> round, std::string_view client_id,
                          std::string detail_json) {
  env_.events.record(kind, run, round, client_id, std::move(detail_json));
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
  return {};
}

result<void> RunController::stop_run(std::int64_t run_id) {
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
  stopping_ = true;
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
                              std::span<const float> params, std::uint64_t bytes) {
  RoundInFlight* round = active_ && active_->round ? &*active_->round : nullptr;
  if (round == nullptr || round->stage != RoundStage::collecting) {
    event("update_stale", report.run_id, report.round, client_id,
          json{{"reason", "no round in progress"}}.dump());
    spdlog::warn("client '{}': update for run {} round {} refused: no round in progress", client_id,
                 report.run_id, report.round);
    return;
  }
  std::string why;
  const auto verdict = round->judge->on_update(client_id, report, params, bytes, &why);
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
            json{{"reason", why}, {"reason_code", rejection_code_of(*round->judge, client_id)}}
                .dump());
      break;
    case UpdateVerdict::stale:
      spdlog::warn("run {} round {}: update from '{}' refused: {}", run, round->number, client_id,
                   why);
      event("update_stale", run, round->number, client_id,
            json{{"reason", why}, {"reason_code", "stale"}}.dump());
      break;
  }
}

// A selected client that could not train has answered the round (as dropped, with its
// words), so the round closes as soon as everyone answered instead of at the deadline.
void RunController::on_client_error(const std::string& client_id, const std::string& message) {
  RoundInFlight* round = active_ && active_->round ? &*active_->round : nullptr;
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
  RoundInFlight* round = active_ && active_->round ? &*active_->round : nullptr;
  if (round != nullptr && round->stage == RoundStage::collecting &&
      round->judge->is_selected(client_id)) {
    round->judge->on_dropped(client_id, "connection lost: " + reason);
  }
}

// ---------------------------------------------------------------- driving the run

void RunController::poll() {
  // A hook called from a step may call back into the controller (stop_run, start_run);
  // the outer loop then simply looks at the new state.
  if (polling_) {
    return;
  }
  polling_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{polling_};
  for (int steps = 0; active_ && step(); ++steps) {
    // Every step either waits (returns false) or moves a stage; a round has fewer than
    // ten stages, so this bound is never reached by a correct machine.
    FEDCORE_ASSERT(steps < 1000, "the run controller is not making progress");
  }
}

std::optional<Clock::steady_time> RunController::next_wakeup() const {
  if (!active_) {
    return std::nullopt;
  }
  switch (active_->phase) {
    case RunPhase::learning_schema:
    case RunPhase::waiting_for_clients:
      return active_->wait_deadline;
    case RunPhase::in_round:
      if (active_->round && active_->round->stage == RoundStage::collecting) {
        return active_->round->deadline;
      }
      return env_.clock.steady();  // a stage is ready to move: poll again at once
    case RunPhase::idle:
    case RunPhase::waiting_for_admin:
      return std::nullopt;
  }
  return std::nullopt;
}

std::vector<Candidate> RunController::eligible(bool check_schema) const {
  auto online = env_.sessions.online();
  if (!check_schema || !active_->model) {
    return online;
  }
  const auto& spec = active_->model->spec;
  std::erase_if(online, [&](const Candidate& c) {
    // A client whose data does not fit this model cannot train it.
    return c.input_shape != spec.input_shape || c.num_classes > spec.num_classes;
  });
  return online;
}

// One move of the active run; false when it must wait for an input or the clock.
bool RunController::step() {
  auto& run = *active_;
  const auto now = env_.clock.steady();
  const auto needed = static_cast<std::size_t>(std::max<std::int64_t>(run.config.min_clients, 1));
  switch (run.phase) {
    case RunPhase::idle:
      return false;
    case RunPhase::learning_schema: {
      if (!run.config.model.complete() && eligible(false).size() < needed) {
        if (now < run.wait_deadline) {
          return false;
        }
        end_run(store::RunState::paused, "not enough clients online to learn the data schema");
        return true;
      }
      return prepare();
    }
    case RunPhase::waiting_for_admin:
      if (!run.round_requested) {
        return false;
      }
      begin_waiting_for_clients();
      return true;
    case RunPhase::waiting_for_clients:
      if (eligible(true).size() >= needed) {
        begin_round();
        return true;
      }
      if (now < run.wait_deadline) {
        return false;
      }
      end_run(store::RunState::paused, "fewer than " + std::to_string(run.config.min_clients) +
                                           " clients online after waiting " +
                                           std::to_string(run.config.wait_for_clients_s) + " s");
      return true;
    case RunPhase::in_round:
      return step_round();
  }
  return false;
}

// Builds the run's model (completing its spec from a client's schema when needed),
// resumes from the last committed checkpoint, and goes to the first round's wait.
bool RunController::prepare() {
  auto& run = *active_;
  std::optional<Candidate> schema;
  if (!run.config.model.complete()) {
    schema = eligible(false).front();
  }
  auto model = prepare_run_model(run.config, run.record.id, schema ? &schema->input_shape : nullptr,
                                 schema ? schema->num_classes : 0, env_.store, env_.checkpoint_dir);
  if (!model) {
    end_run(store::RunState::failed, model.error().message);
    return true;
  }
  run.model = std::move(*model);
  begin_waiting_for_clients();
  return true;
}

void RunController::begin_waiting_for_clients() {
  auto& run = *active_;
  run.round.reset();
  auto current = env_.store.get_run(run.record.id);
  if (!current) {
    end_run(store::RunState::failed, "cannot read the run: " + current.error().message);
    return;
  }
  run.record = *current;
  const auto next = run.record.last_round + 1;
  if (next > run.config.rounds) {
    spdlog::info("run {} finished after {} rounds", run.record.id, run.config.rounds);
    end_run(store::RunState::finished, "");
    return;
  }
  if (run.config.manual && !run.round_requested) {
    spdlog::info("run {}: round {} waits for an admin (manual run)", run.record.id, next);
    run.phase = RunPhase::waiting_for_admin;
    return;
  }
  run.phase = RunPhase::waiting_for_clients;
  run.wait_deadline = env_.clock.steady() + seconds_to_ms(run.config.wait_for_clients_s);
}

// selecting -> training -> collecting: sample, issue nonces, send the global model.
void RunController::begin_round() {
  auto& run = *active_;
  auto& model = *run.model;
  run.phase = RunPhase::in_round;
  run.round.emplace();
  auto& round = *run.round;
  round.number = run.record.last_round + 1;
  round.started_ms = env_.clock.wall_ms();

  // Seeded sampling: sort the eligible ids, shuffle with (seed, round, attempt).
  auto candidates = eligible(true);
  std::sort(candidates.begin(), candidates.end(),
            [](const auto& a, const auto& b) { return a.client_id < b.client_id; });
  Rng rng(run.config.seed * 1000003ULL + static_cast<std::uint64_t>(round.number) * 7919ULL +
          static_cast<std::uint64_t>(run.attempt));
  rng.shuffle(std::span(candidates));
  candidates.resize(clients_to_sample(run.config, candidates.size()));
  std::map<std::string, std::string> nonces;
  for (const auto& c : candidates) {
    nonces[c.client_id] = env_.entropy.nonce();
  }
  run.move(RoundEvent::clients_selected);

  model.strategy->begin_round(*model.global);
  RoundSettings settings;
  settings.run_id = run.record.id;
  settings.round = round.number;
  settings.min_clients = static_cast<std::size_t>(run.config.min_clients);
  settings.checks.max_update_norm = run.config.max_update_norm;
  round.judge.emplace(settings, nonces, *model.global, model.layout, *model.strategy);
  spdlog::info("run {} round {}: training on {} client(s)", run.record.id, round.number,
               candidates.size());
  event("round_started", run.record.id, round.number, "",
        json{{"clients", candidates.size()}, {"attempt", run.attempt + 1}}.dump());
  for (const auto& c : candidates) {
    protocol::TrainRequest request;
    request.run_id = run.record.id;
    request.round = round.number;
    request.nonce = nonces[c.client_id];
    request.model_spec_json = model.spec_json;
    request.layout_fingerprint = model.layout.fingerprint_hex();
    request.settings = {run.config.local_epochs, run.config.batch_size, run.config.optimizer_json,
                        run.config.proximal_mu,
                        run.config.seed + static_cast<std::uint64_t>(round.number)};
    request.evaluate = run.config.federated_evaluation;
    auto metadata = protocol::to_metadata(request);
    round.judge->set_bytes_down(c.client_id, protocol::kFrameHeaderSize + metadata.size() +
                                                 model.global->size() * sizeof(float));
    env_.sessions.send_train(c.client_id, std::move(metadata), model.global);
  }
  round.deadline = env_.clock.steady() + seconds_to_ms(run.config.round_timeout_s);
  run.move(RoundEvent::requests_sent);
}

bool RunController::step_round() {
  auto& run = *active_;
  auto& round = *run.round;
  switch (round.stage) {
    case RoundStage::collecting:
      if (round.judge->all_answered()) {
        run.move(RoundEvent::all_answered);
      } else if (env_.clock.steady() >= round.deadline) {
        run.move(RoundEvent::deadline_passed);
      } else {
        return false;
      }
      run.round_requested = false;
      return true;
    case RoundStage::aggregating:
      close_round();
      return true;
    case RoundStage::committing:
      commit_round();
      return true;
    case RoundStage::done:
      run.attempt = 0;
      begin_waiting_for_clients();
      return true;
    case RoundStage::selecting:
    case RoundStage::training:
    case RoundStage::failed:
      break;
  }
  FEDCORE_ASSERT(false, "a round rests only in collecting, aggregating or committing");
  return false;
}

// aggregating: quorum decides; a failed round is recorded, then retried or the run pauses.
void RunController::close_round() {
  auto& run = *active_;
  auto& round = *run.round;
  round.closed = round.judge->close();
  if (round.closed.succeeded) {
    run.move(RoundEvent::aggregated);
    return;
  }
  run.move(RoundEvent::quorum_missed);
  auto report =
      make_round_report(*round.judge, round.closed, round.started_ms, env_.clock.wall_ms());
  report.record.failure_reason = round.closed.failure_reason;
  if (auto saved = env_.store.record_failed_round(report.record, report.results); !saved) {
    spdlog::error("run {} round {}: could not record the failure: {}", run.record.id, round.number,
                  saved.error().message);
  }
  spdlog::warn("run {} round {} failed: {}", run.record.id, round.number,
               round.closed.failure_reason);
  event("round_failed", run.record.id, round.number, "",
        json{{"reason", round.closed.failure_reason}}.dump());
  const bool retry = run.config.on_failed_round == FailedRoundPolicy::retry &&
                     run.attempt < run.config.max_retries;
  const auto reason =
      "round " + std::to_string(round.number) + " failed: " + round.closed.failure_reason;
  // The hook first, as for a committed round: whoever waits for the run to end has seen
  // the failed round by then. A hook may stop the run; then there is nothing left to do.
  const auto generation = generation_;
  if (env_.hooks.round_failed) {
    env_.hooks.round_failed(run.record.id, report.record);
  }
  if (!active_ || generation_ != generation) {
    return;
  }
  if (retry) {
    ++run.attempt;
    run.round.reset();
    run.phase = RunPhase::waiting_for_clients;
    run.wait_deadline = env_.clock.steady() + seconds_to_ms(run.config.wait_for_clients_s);
  } else {
    end_run(store::RunState::paused, reason);
  }
}

// committing: the strategy's output becomes the global model, its checkpoint is durable
// before the transaction that commits the round row and names it.
void RunController::commit_round() {
  auto& run = *active_;
  auto& round = *run.round;
  auto& model = *run.model;
  auto report =
      make_round_report(*round.judge, round.closed, round.started_ms, env_.clock.wall_ms());
  // The judge viewed the old global model; it is not used past this point.
  round.judge.reset();
  model.global = std::make_shared<const std::vector<float>>(model.strategy->finish_round());
  if (auto eval = model.evaluate_global()) {
    report.record.eval_loss = eval->loss;
    report.record.eval_accuracy = eval->accuracy;
  }
  auto checkpoint = model.write_checkpoint(run.record.id, round.number);
  if (!checkpoint) {
    run.move(RoundEvent::commit_failed);
    end_run(store::RunState::paused, "cannot write checkpoint: " + checkpoint.error().message);
    return;
  }
  auto committed = env_.store.commit_round(report.record, report.results, *checkpoint);
  if (!committed) {
    run.move(RoundEvent::commit_failed);
    end_run(store::RunState::paused, "cannot commit round " + std::to_string(round.number) + ": " +
                                         committed.error().message);
    return;
  }
  run.move(RoundEvent::committed);
  spdlog::info("run {} round {} committed: {} of {} updates accepted, train loss {:.4f}{}",
               run.record.id, round.number, round.closed.accepted, report.record.selected,
               report.record.train_loss,
               report.record.eval_accuracy
                   ? ", server accuracy " + std::to_string(*report.record.eval_accuracy)
                   : "");
  event("round_committed", run.record.id, round.number, "",
        json{{"accepted", round.closed.accepted},
             {"rejected", round.closed.rejected},
             {"timed_out", round.closed.timed_out}}
            .dump());
  if (env_.hooks.round_committed) {
    env_.hooks.round_committed(run.record.id, *committed);
  }
}

// ---------------------------------------------------------------- reading

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
  return active_ && active_->round && active_->round->judge &&
         active_->round->judge->is_selected(client_id) &&
         !active_->round->judge->has_answered(client_id);
}

}  // namespace fedcore::server
