// RunController, driving the active run: poll() and the steps of a run — learning the
// schema, preparing the model, waiting for clients or the admin — and of a round, from
// selecting to aggregating (round_stage.hpp has the transitions; the commit is in
// run_controller_commit.cpp).
#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/federation/aggregate.hpp"
#include "server/federation/detail/active_run.hpp"
#include "server/federation/dp_fedavg.hpp"
#include "server/federation/fixed_point_mean.hpp"
#include "server/federation/round.hpp"
#include "server/federation/round_report.hpp"
#include "server/federation/run_controller.hpp"
#include "server/federation/run_model.hpp"
#include "server/federation/secure_round.hpp"
#include "shared/privacy/adaptive_clip.hpp"
#include "shared/privacy/distributed_dp.hpp"
#include "shared/privacy/gaussian.hpp"
#include "shared/privacy/noise_source.hpp"
#include "shared/protocol/frame.hpp"
#include "shared/util/assert.hpp"
#include "shared/util/checksum.hpp"
#include "shared/util/cpu_time.hpp"
#include "shared/util/rng.hpp"
#include "shared/util/test_point.hpp"

namespace fedcore::federation {
namespace {
using json = nlohmann::json;
}  // namespace

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
  if (!active_ && hold_ && env_.clock.steady() >= hold_->next_probe) {
    retry_held_run();  // a run paused for its storage: probe, and resume if it passes
  }
  settle_pending_commits(kMaxHandedOff);  // handed-off rounds whose writes are done commit
  for (int steps = 0; active_ && step(); ++steps) {
    // Every step either waits (returns false) or moves a stage; a round has fewer than
    // ten stages, so this bound is never reached by a correct machine.
    FEDCORE_ASSERT(steps < 1000, "the run controller is not making progress");
  }
}

std::optional<Clock::steady_time> RunController::next_wakeup() const {
  if (!active_) {
    return hold_ ? std::optional(hold_->next_probe) : std::nullopt;
  }
  switch (active_->phase) {
    case RunPhase::learning_schema:
    case RunPhase::waiting_for_clients:
      return active_->wait_deadline;
    case RunPhase::collecting_feature_stats:
      return active_->stats_deadline;
    case RunPhase::in_round:
      if (active_->round && (active_->round->stage == RoundStage::collecting ||
                             active_->round->stage == RoundStage::sharing_keys ||
                             active_->round->stage == RoundStage::masking ||
                             active_->round->stage == RoundStage::consistency ||
                             active_->round->stage == RoundStage::unmasking ||
                             active_->round->stage == RoundStage::evaluating)) {
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
  std::erase_if(online, [&](const Candidate& c) { return still_training_.contains(c.client_id); });
  if (!check_schema || !active_->model) {
    return online;
  }
  const auto& spec = active_->model->spec;
  const bool compressed = active_->config.compression.up != protocol::UpdateEncoding::f32;
  const bool scaffold = active_->model->strategy->wants_control();
  const bool site_batch_norm = !active_->model->site_ranges.empty();
  const bool secure_clip = active_->config.privacy.dp.adaptive.has_value() &&
                           active_->config.privacy.secure_aggregation.has_value();
  std::erase_if(online, [&](const Candidate& c) {
    // A client whose data does not fit this model cannot train it, nor can a client of a
    // protocol version before external models train one, nor one before compressed updates
    // take part in a run that compresses, nor one before SCAFFOLD in a SCAFFOLD run, nor
    // one before FedBN in a run that keeps BatchNorm at the sites.
    return c.input_shape != spec.input_shape || c.num_classes > spec.num_classes ||
           (spec.type == model::ModelType::external &&
            c.protocol_version < protocol::kExternalModelsProtocolVersion) ||
           (compressed && c.protocol_version < protocol::kCompressionProtocolVersion) ||
           (scaffold && c.protocol_version < protocol::kScaffoldProtocolVersion) ||
           (site_batch_norm && c.protocol_version < protocol::kSiteBatchNormProtocolVersion) ||
           (secure_clip && c.protocol_version < protocol::kSecureAdaptiveClipProtocolVersion);
  });
  return online;
}

// One move of the active run; false when it must wait for an input or the clock.
bool RunController::step() {
  auto& run = *active_;
  const auto now = env_.clock.steady();
  const auto needed = static_cast<std::size_t>(
      std::max({run.config.min_clients, run.config.min_available_clients, std::int64_t{1}}));
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
        if (!run.scaling) {
          begin_feature_stats();  // once per run, before its first round
        } else {
          begin_round();
        }
        return true;
      }
      if (now < run.wait_deadline) {
        return false;
      }
      end_run(store::RunState::paused, "fewer than " + std::to_string(needed) +
                                           " clients online after waiting " +
                                           std::to_string(run.config.wait_for_clients_s) + " s");
      return true;
    case RunPhase::collecting_feature_stats:
      if (!run.stats->all_answered() && now < run.stats_deadline) {
        return false;
      }
      finish_feature_stats();
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
  run.model->strategy->use_workers(env_.workers);
  settle_feature_scaling();
  if (active_) {
    begin_waiting_for_clients();
  }
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
  const auto next = next_round_number();
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

// Seeded sampling: sort the eligible ids, shuffle with (seed, round, attempt), keep the
// configured number.
std::vector<Candidate> RunController::select_clients(
    std::int64_t round, std::map<std::string, std::uint64_t>* draws) const {
  const auto& run = *active_;
  auto candidates = eligible(true);
  std::sort(candidates.begin(), candidates.end(),
            [](const auto& a, const auto& b) { return a.client_id < b.client_id; });
  Rng rng(run.config.seed * 1000003ULL + static_cast<std::uint64_t>(round) * 7919ULL +
          static_cast<std::uint64_t>(run.attempt));
  const std::size_t picks = clients_to_select(run.config, candidates.size());
  if (run.config.client_sampling == ClientSampling::weighted && !candidates.empty()) {
    // `picks` draws with replacement, each client with probability samples / Σ samples (a
    // client that declared none counts as one sample, so every site can be drawn).
    std::vector<std::uint64_t> cumulative;
    std::uint64_t total = 0;
    for (const auto& c : candidates) {
      total += std::max<std::uint64_t>(c.samples, 1);
      cumulative.push_back(total);
    }
    std::map<std::string, std::uint64_t> drawn;
    for (std::size_t i = 0; i < picks; ++i) {
      const auto at = std::upper_bound(cumulative.begin(), cumulative.end(), rng.below(total));
      ++drawn[candidates[static_cast<std::size_t>(at - cumulative.begin())].client_id];
    }
    std::erase_if(candidates, [&](const Candidate& c) { return !drawn.contains(c.client_id); });
    if (draws != nullptr) {
      *draws = std::move(drawn);
    }
    return candidates;
  }
  rng.shuffle(std::span(candidates));
  candidates.resize(picks);
  return candidates;
}

// selecting -> training -> collecting: sample, issue nonces, send the global model.
void RunController::begin_round() {
  auto& run = *active_;
  auto& model = *run.model;
  FEDCORE_ASSERT(run.scaling.has_value(), "a round begins after the feature scale is settled");
  run.phase = RunPhase::in_round;
  run.round.emplace();
  auto& round = *run.round;
  round.number = next_round_number();
  round.started_ms = env_.clock.wall_ms();
  round.timer.emplace(env_.clock,
                      env_.cpu_times ? env_.cpu_times : CpuTimeSource(process_cpu_times));
  test_point("round.begin", std::to_string(round.number));

  const auto population = eligible(true).size();
  const auto needed = clients_to_sample(run.config, population);
  std::map<std::string, std::uint64_t> draws;  // weighted sampling only
  auto candidates = select_clients(round.number, &draws);
  if (!spend_privacy_budget(candidates)) {
    return;  // the run ended: the budget (or its accounting) does not allow this round
  }
  std::map<std::string, std::string> nonces;
  for (const auto& c : candidates) {
    nonces[c.client_id] = env_.entropy.nonce();
  }
  run.move(RoundEvent::clients_selected);

  // The weight cap: the admin's, and an equal share of what the exact sum holds
  // (fixed_point_mean.hpp, 2^46 in all). A claim may be 2^32 samples (UpdateChecks), so
  // only rounds of more than 16,384 sites with near that many each reach the share; it is
  // order-independent, unlike refusing whichever update happened to overflow. Then the most
  // weight this round's updates can bring: each selected client's declared samples under
  // the per-update limit and the cap (Round rejects a claim above its declaration or the
  // limit), so the strategy sizes its exact sum before the first update.
  const std::uint64_t share =
      (FixedPointMean::kMaxTotalWeight - 1) / std::max<std::size_t>(candidates.size(), 1);
  const std::uint64_t admin_cap = run.config.max_samples_per_client;
  RoundSettings settings;
  settings.run_id = run.record.id;
  settings.round = round.number;
  settings.min_clients = static_cast<std::size_t>(run.config.min_clients);
  if (!draws.empty()) {
    // A weighted draw may pick one site several times: the quorum cannot exceed the distinct
    // sites drawn, and each update weighs its draws (run_config.hpp, "Client sampling").
    settings.min_clients = std::min(settings.min_clients, candidates.size());
    settings.weights = draws;
  }
  settings.checks.max_update_norm = run.config.max_update_norm;
  settings.max_samples_per_client = admin_cap > 0 ? std::min(admin_cap, share) : share;
  if (run.config.over_selection > 0) {
    settings.target_updates = needed;  // close once these are in; the rest will be late
  }
  std::uint64_t max_total_weight = 1;
  for (const auto& c : candidates) {
    settings.declared_samples[c.client_id] = c.samples;  // from its HELLO
    max_total_weight +=
        draws.empty()
            ? std::min({c.samples, settings.checks.max_samples, settings.max_samples_per_client})
            : draws.at(c.client_id);
  }
  model.strategy->begin_round(*model.global, max_total_weight);
  model.strategy->expect_clients(candidates.size());
  model.strategy->expect_population(std::max(population, candidates.size()));
  round.judge.emplace(settings, nonces, *model.global, model.layout, *model.strategy,
                      &*round.timer);
  protocol::PrivacyTerms privacy;
  privacy.dp = run.config.privacy.dp.mode;
  privacy.epsilon = run.config.privacy.dp.epsilon;
  privacy.delta = run.config.privacy.dp.delta;
  privacy.clip_norm = run.config.privacy.dp.clip_norm;
  privacy.noise_multiplier = run.budget ? run.budget->noise_multiplier() : 0.0;
  if (run.secure_clip) {
    // The sites clip to this round's C and report their unclipped bit (protocol 6).
    privacy.clip_norm = run.secure_clip->clip();
    privacy.count_stddev = run.secure_clip->count_stddev();
  }
  if (const auto& secure = run.config.privacy.secure_aggregation) {
    privacy.secure_aggregation = true;
    auto plan = secagg::plan_round(static_cast<std::uint32_t>(candidates.size()), secure->settings);
    if (plan) {
      // Weights are min(samples, cap) / cap: the largest sample count a selected client
      // declared, so the best-provided site weighs 1 and nobody can weigh more.
      std::uint64_t cap = 1;
      for (const auto& c : candidates) {
        cap = std::max(cap, c.samples);
      }
      if (run.config.max_samples_per_client > 0) {
        cap = std::min<std::uint64_t>(cap, run.config.max_samples_per_client);
      }
      plan->weight_cap = cap;
      plan->bind_keys = secure->bind_keys;
      // Federated evaluation travels inside the masked sum (secure_participation.cpp),
      // unless the run lets the sites send their own (an evaluating stage, as in plain runs).
      plan->metric_slots =
          run.config.federated_evaluation && !secure->per_client_evaluation ? 3 : 0;
      if (run.secure_clip) {
        plan->metric_slots += 1;  // the unclipped bit, last
      }
      if (run.config.privacy.dp.mode == protocol::DpMode::client_distributed) {
        // The round needs its quorum anyway: each site's noise share is sized for it rather
        // than for the (usually much smaller) Shamir threshold, and sites refuse to sign a
        // shorter survivor list (secagg/plan.hpp).
        plan->min_survivors = std::min<std::uint32_t>(
            plan->clients, std::max<std::uint32_t>(plan->threshold, static_cast<std::uint32_t>(
                                                                        run.config.min_clients)));
      }
      round.secure.emplace(run.record.id, round.number, *plan, nonces, model.global->size());
    } else {
      spdlog::warn("run {} round {}: {}", run.record.id, round.number, plan.error().message);
    }
  }
  spdlog::info("run {} round {}: training on {} client(s)", run.record.id, round.number,
               candidates.size());
  event("round_started", run.record.id, round.number, "",
        json{{"clients", candidates.size()}, {"attempt", run.attempt + 1}}.dump());
  // The TRAIN payload, one shared buffer for every site: the global model as it is, or as
  // f16 words when the run compresses the download.
  auto payload = model.global;
  if (run.config.compression.down == protocol::UpdateEncoding::f16) {
    payload = std::make_shared<const std::vector<float>>(protocol::encode_model_f16(*model.global));
  }
  const bool scaffold = model.strategy->wants_control();
  if (scaffold) {
    // SCAFFOLD: the global model, then the server's control variate (scaffold.hpp).
    const auto control = model.strategy->control();
    auto both = std::make_shared<std::vector<float>>();
    both->reserve(model.global->size() + control.size());
    both->insert(both->end(), model.global->begin(), model.global->end());
    both->insert(both->end(), control.begin(), control.end());
    payload = std::move(both);
  }
  for (const auto& c : candidates) {
    protocol::TrainRequest request;
    request.run_id = run.record.id;
    request.round = round.number;
    request.nonce = nonces[c.client_id];
    request.model_spec = model.spec_json;
    request.layout_fingerprint = model.layout.fingerprint_hex();
    request.settings = {run.config.local_epochs, run.config.batch_size, run.config.optimizer_json,
                        run.config.proximal_mu,
                        run.config.seed + static_cast<std::uint64_t>(round.number)};
    // Only a secure round's masked sum still carries an evaluation of the received model;
    // every other run evaluates each new model after aggregating it (evaluating stage).
    request.evaluate = privacy.secure_aggregation && run.config.federated_evaluation &&
                       !run.config.privacy.secure_aggregation->per_client_evaluation;
    request.privacy = privacy;
    request.scaling = *run.scaling;
    request.compression = run.config.compression;
    request.scaffold = scaffold;
    request.site_batch_norm = !model.site_ranges.empty();
    if (request.compression.down != protocol::UpdateEncoding::f32) {
      request.compression.parameters = model.global->size();
    }
    auto metadata = protocol::to_metadata(request);
    round.judge->set_bytes_down(c.client_id, protocol::kFrameHeaderSize + metadata.size() +
                                                 payload->size() * sizeof(float));
    env_.sessions.send_train(c.client_id, std::move(metadata), payload,
                             [this, alive = std::weak_ptr<const char>(alive_), run = run.record.id,
                              number = round.number, attempt = run.attempt] {
                               if (!alive.expired()) {
                                 on_train_written(run, number, attempt);
                               }
                             });
  }
  round.timer->requests_queued();
  round.deadline = env_.clock.steady() + seconds_to_ms(run.config.round_timeout_s);
  run.move(RoundEvent::requests_sent);
  if (run.config.privacy.secure_aggregation && !round.secure) {
    fail_secure_round("secure aggregation needs at least 3 clients in a round, " +
                      std::to_string(candidates.size()) + " selected");
  }
}

bool RunController::step_round() {
  auto& run = *active_;
  auto& round = *run.round;
  switch (round.stage) {
    case RoundStage::sharing_keys:
    case RoundStage::masking:
    case RoundStage::consistency:
    case RoundStage::unmasking:
      return step_secure_stage();
    case RoundStage::collecting:
      if (round.secure) {
        return step_secure_stage();
      }
      if (round.judge->all_answered()) {
        run.move(RoundEvent::all_answered);
      } else if (round.judge->target_reached()) {
        run.move(RoundEvent::target_reached);
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
    case RoundStage::evaluating:
      return step_evaluation();
    case RoundStage::committing:
      commit_round();
      return true;
    case RoundStage::persisting:  // handed off: the next round need not wait for the write
    case RoundStage::done:
      run.attempt = 0;
      begin_waiting_for_clients();
      return true;
    case RoundStage::selecting:
    case RoundStage::training:
    case RoundStage::failed:
      break;
  }
  FEDCORE_ASSERT(false,
                 "a round rests only in collecting, the secure stages, aggregating or "
                 "committing");
  return false;
}

// One of secure aggregation's stages: wait for everyone it expects (or its deadline),
// then close it and send the next stage's messages; after unmasking, the weighted mean
// update becomes the strategy's single input.
bool RunController::step_secure_stage() {
  auto& run = *active_;
  auto& round = *run.round;
  auto& secure = *round.secure;
  const auto now = env_.clock.steady();
  if (!secure.stage_complete() && now < round.deadline) {
    return false;
  }
  const auto stage_timeout = seconds_to_ms(run.config.privacy.secure_aggregation->stage_timeout_s);
  if (round.stage == RoundStage::unmasking) {
    const auto unmasking = round.timer->now();
    auto result = secure.finish();
    round.timer->add(&store::RoundPhases::aggregate_ms, unmasking);
    if (!result) {
      fail_secure_round(result.error().message);
      return true;
    }
    for (const auto& id : result->contributors) {
      const auto up = secure.bytes_up().count(id) ? secure.bytes_up().at(id) : 0;
      round.judge->on_secure_contribution(id, up, secure.bytes_down(id));
    }
    // Whoever is not in the sum left at some stage: say which.
    for (const auto& outcome : std::vector<ClientOutcome>(round.judge->outcomes())) {
      if (!secure.contributed(outcome.client_id) && !round.judge->has_answered(outcome.client_id)) {
        round.judge->on_dropped(outcome.client_id,
                                "secure aggregation: " + secure.progress_of(outcome.client_id));
      }
    }
    auto& model = *run.model;
    if (auto scaled = privatize_secure_mean(*result, round.judge->outcomes().size()); !scaled) {
      fail_secure_round(scaled.error().message);
      return true;
    }
    std::vector<float> next(model.global->begin(), model.global->end());
    for (std::size_t i = 0; i < next.size(); ++i) {
      next[i] += result->mean_delta[i];
    }
    // The sites' updates were never validated one by one; their mean must still fit the
    // aggregation's range (a clipping range times sqrt(parameters) can exceed it).
    if (const double moved = update_distance(next, *model.global);
        !(moved <= FixedPointMean::kMaxDistance)) {
      fail_secure_round("the unmasked mean moves the model by L2 norm " + std::to_string(moved) +
                        ", above the aggregation's limit " +
                        std::to_string(FixedPointMean::kMaxDistance));
      return true;
    }
    model.strategy->add_update(next, 1);
    if (result->metric_sums.size() == 3 && result->metric_sums[2] > 0) {
      // Only the sums exist: the federation's evaluation without any one site's.
      round.secure_evaluation = std::pair(result->metric_sums[0] / result->metric_sums[2],
                                          result->metric_sums[1] / result->metric_sums[2]);
    }
    spdlog::info("run {} round {}: secure sum of {} masked updates unmasked", run.record.id,
                 round.number, result->contributors.size());
    run.move(RoundEvent::unmasked);
    run.round_requested = false;
    return true;
  }
  // The graph's layout: seeded like the sampling, so a run can be replayed; it is the
  // server's choice in SecAgg+ and needs no secrecy.
  Rng graph_rng(run.config.seed * 6364136223846793005ULL +
                static_cast<std::uint64_t>(round.number) +
                static_cast<std::uint64_t>(run.attempt) * 1442695040888963407ULL);
  const auto stage_before = round.stage;
  if (auto closed = secure.close_stage(env_.sessions, graph_rng); !closed) {
    fail_secure_round(closed.error().message);
    return true;
  }
  run.move(stage_before == RoundStage::collecting     ? RoundEvent::keys_collected
           : stage_before == RoundStage::sharing_keys ? RoundEvent::shares_collected
           : stage_before == RoundStage::masking      ? RoundEvent::inputs_collected
                                                      : RoundEvent::survivors_signed);
  round.deadline = env_.clock.steady() + stage_timeout;
  return true;
}

// Fewer than the threshold are left: the round fails visibly and the run follows its
// failed-round policy, as for a missed quorum.
void RunController::fail_secure_round(const std::string& why) {
  auto& run = *active_;
  auto& round = *run.round;
  for (const auto& outcome : std::vector<ClientOutcome>(round.judge->outcomes())) {
    if (!round.judge->has_answered(outcome.client_id)) {
      round.judge->on_dropped(
          outcome.client_id,
          round.secure ? "secure aggregation: " + round.secure->progress_of(outcome.client_id)
                       : std::string("secure aggregation impossible"));
    }
  }
  round.closed = round.judge->close();
  round.closed.succeeded = false;
  round.closed.failure_reason = why;
  run.move(RoundEvent::below_threshold);
  run.round_requested = false;
  record_failed_round();
}

// aggregating: quorum decides; a failed round is recorded, then retried or the run pauses.
void RunController::close_round() {
  auto& run = *active_;
  auto& round = *run.round;
  env_.sessions.uploads_done();  // before the aggregation and checkpoint need the memory
  round.closed = round.judge->close();
  for (const auto& o : round.judge->outcomes()) {
    if (o.status == ClientStatus::late) {
      still_training_.insert(o.client_id);
    }
  }
  if (round.closed.late > 0) {
    spdlog::info("run {} round {}: closed with {} update(s); {} over-selected site(s) late",
                 run.record.id, round.number, round.closed.accepted, round.closed.late);
  }
  // A quorum is not always enough: a robust aggregator needs enough updates for the faulty
  // ones it tolerates (Krum: n > 2f + 2). The round then fails like a missed quorum.
  if (round.closed.succeeded && !round.secure) {
    if (auto refused = run.model->strategy->refuse_finish()) {
      round.closed.succeeded = false;
      round.closed.failure_reason = "strategy " + run.config.strategy + ": " + *refused;
    }
  }
  if (round.closed.succeeded) {
    if (evaluation_due()) {
      begin_evaluation();  // the participants evaluate the new model before it commits
    } else {
      run.move(RoundEvent::aggregated);
    }
    return;
  }
  run.move(RoundEvent::quorum_missed);
  record_failed_round();
}

// The round failed (no quorum, or below secure aggregation's threshold): recorded, then
// retried or the run pauses.
void RunController::record_failed_round() {
  // Rounds are recorded in order: those handed off before this one commit first.
  if (!settle_pending_commits(0)) {
    return;  // it failed, and this attempt, built on its model, went with the run
  }
  auto& run = *active_;
  auto& round = *run.round;
  if (round.timer) {
    round.timer->closed();
  }
  auto report =
      make_round_report(*round.judge, round.closed, round.started_ms, env_.clock.wall_ms());
  report.record.failure_reason = round.closed.failure_reason;
  report.record.secure_aggregation = round.secure.has_value();
  report.record.epsilon = round.epsilon;
  report.record.dp_charge = round.dp_charge;
  if (report.record.dp_charge) {
    report.record.dp_charge->clip_norm = adaptive_clip_norm();
  }
  spdlog::warn("run {} round {} failed: {}", run.record.id, round.number,
               round.closed.failure_reason);
  // The attempt's event is written in the attempt's own transaction: one fsync for both.
  auto failed_event =
      round_event("round_failed", json{{"reason", round.closed.failure_reason}}.dump());
  if (auto saved = env_.store.record_failed_round(report.record, report.results, &failed_event);
      !saved) {
    if (is_storage_failure(saved.error())) {
      // The storage refused the record, as it would refuse a commit: the run is held for
      // its storage and runs this round again once the storage takes writes, rather than
      // retrying or pausing with a history that misses the attempt.
      hold_for_storage(saved.error(), FailedWrite::round_commit);
      return;
    }
    spdlog::error("run {} round {}: could not record the failure: {}", run.record.id, round.number,
                  saved.error().message);
    event("round_failed", run.record.id, round.number, "", failed_event.detail_json);
  } else {
    record_phases(*round.timer, round.number, saved->attempt);
    env_.events.announce(failed_event);
  }
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

void RunController::on_train_written(std::int64_t run_id, std::int64_t round,
                                     std::int32_t attempt) {
  if (!active_ || !active_->round || active_->record.id != run_id ||
      active_->round->number != round || active_->attempt != attempt || !active_->round->timer) {
    return;  // a frame of an attempt that is over
  }
  active_->round->timer->train_written();
}

// ---------------------------------------------------------------- differential privacy

// Before a DP round: what it will cost, and whether the budget allows it. The first DP
// round of an activation sets the noise multiplier (calibrated when the config says 0)
// and counts the attempts already in the history (a resumed run has spent them).
bool RunController::spend_privacy_budget(const std::vector<Candidate>& selected) {
  auto& run = *active_;
  const auto& dp = run.config.privacy.dp;
  if (dp.mode == protocol::DpMode::none) {
    return true;
  }
  // Every selected site's shape: steps are rounded per site, so the smallest site is not
  // always the one that spends most (a site's own ledger, client/dp_ledger.hpp, would
  // refuse a round the server under-accounted).
  std::vector<DpRoundShape> shapes;
  for (const auto& c : selected) {
    auto shape = dp_round_shape(dp, run.config.local_epochs, run.config.batch_size, c.samples);
    if (!shape) {
      end_run(store::RunState::paused,
              "privacy: site '" + c.client_id + "': " + shape.error().message);
      return false;
    }
    shapes.push_back(*shape);
  }
  if (shapes.empty()) {
    shapes.push_back(DpRoundShape{});
  }
  const std::span<const DpRoundShape> shape(shapes);
  std::optional<double> resumed_clip;
  if (!run.budget) {
    auto past = env_.store.list_rounds(run.record.id);
    if (!past) {
      end_run(store::RunState::paused,
              "privacy: reading the run's past rounds: " + past.error().message);
      return false;
    }
    auto budget = resume_privacy_budget(dp, shape, *past, resumed_clip);
    if (!budget) {
      end_run(store::RunState::failed, "privacy: " + budget.error().message);
      return false;
    }
    run.budget = std::move(*budget);
    spdlog::info("run {}: {} DP, budget epsilon {} at delta {}, noise multiplier {:.4f}",
                 run.record.id, protocol::dp_mode_name(dp.mode), dp.epsilon, dp.delta,
                 run.budget->noise_multiplier());
    // Adaptive clipping starts from the clip a resumed run had reached. Under secure
    // aggregation the controller keeps it (the sites clip); otherwise DpFedAvg does.
    std::optional<privacy::AdaptiveClip> adaptive;
    if (dp.adaptive) {
      auto made = privacy::AdaptiveClip::create(
          resumed_clip.value_or(dp.clip_norm), dp.adaptive->target_quantile,
          dp.adaptive->learning_rate, dp.adaptive->count_stddev);
      auto split = privacy::update_noise_multiplier(run.budget->noise_multiplier(),
                                                    dp.adaptive->count_stddev);
      if (!made || !split) {
        end_run(store::RunState::failed,
                "privacy: adaptive clipping: " +
                    (!made ? made.error().message : split.error().message));
        return false;
      }
      adaptive = *made;
    }
    if (run.config.privacy.secure_aggregation) {
      run.secure_clip = adaptive;
    } else if (dp.mode == protocol::DpMode::client_central) {
      run.model->strategy = std::make_unique<DpFedAvg>(
          run.model->global->size(), dp.clip_norm, run.budget->noise_multiplier(),
          std::make_unique<privacy::CryptoNormal>(), adaptive);
    }
  }
  auto next = run.budget->epsilon_after_next(shape);
  if (!next) {
    end_run(store::RunState::failed, "privacy accounting failed: " + next.error().message);
    return false;
  }
  if (*next > dp.epsilon * (1 + 1e-9)) {
    const auto number = next_round_number();
    end_run(store::RunState::finished,
            "privacy budget: round " + std::to_string(number) + " would bring epsilon to " +
                std::to_string(*next) + ", above the run's budget of " +
                std::to_string(dp.epsilon) + " (delta " + std::to_string(dp.delta) + ")");
    return false;
  }
  auto spent = run.budget->spend(shape);
  run.round->epsilon = *spent;
  store::DpCharge charge;
  charge.noise_multiplier = run.budget->noise_multiplier();
  for (const auto& s : shapes) {
    const store::DpCharge::Shape stored{s.q, static_cast<std::int64_t>(s.steps_per_round)};
    if (std::find(charge.shapes.begin(), charge.shapes.end(), stored) == charge.shapes.end()) {
      charge.shapes.push_back(stored);
    }
  }
  std::sort(charge.shapes.begin(), charge.shapes.end(), [](const auto& a, const auto& b) {
    return a.q != b.q ? a.q < b.q : a.steps < b.steps;
  });
  run.round->dp_charge = std::move(charge);
  return true;
}

// The budget of a run at its first DP round in this activation. Past attempts with a stored
// charge (schema 7) are composed exactly, each with its own z and shapes, and the run keeps
// the z they were charged at; attempts without one (a history written before schema 7) are
// charged at `shapes` and the calibrated z, as before. `clip` gets adaptive clipping's last
// stored C.
result<PrivacyBudget> RunController::resume_privacy_budget(
    const DpConfig& dp, std::span<const DpRoundShape> shapes,
    const std::vector<store::RoundRecord>& past, std::optional<double>& clip) {
  std::optional<double> charged_z;
  for (const auto& r : past) {
    if (r.dp_charge) {
      charged_z = r.dp_charge->noise_multiplier;
      if (r.dp_charge->clip_norm) {
        clip = r.dp_charge->clip_norm;
      }
    }
  }
  auto budget = charged_z ? PrivacyBudget::with_noise_multiplier(dp, *charged_z)
                          : PrivacyBudget::create(dp, active_->config.rounds, shapes);
  if (!budget) {
    return budget;
  }
  for (const auto& r : past) {
    if (r.dp_charge) {
      std::vector<DpRoundShape> charged;
      for (const auto& s : r.dp_charge->shapes) {
        charged.push_back({s.q, static_cast<std::uint64_t>(s.steps)});
      }
      budget->restore(charged, r.dp_charge->noise_multiplier);
    } else {
      budget->restore(shapes, budget->noise_multiplier());
    }
  }
  return budget;
}

// Adaptive clipping's C now (after the strategy's last finish_round), or nothing.
std::optional<double> RunController::adaptive_clip_norm() const {
  if (!active_ || !active_->config.privacy.dp.adaptive) {
    return std::nullopt;
  }
  if (active_->secure_clip) {
    return active_->secure_clip->clip();
  }
  if (const auto* dp = dynamic_cast<const DpFedAvg*>(active_->model->strategy.get())) {
    return dp->clip_norm();
  }
  return std::nullopt;
}

// Client-level DP under secure aggregation: clients clipped their updates and sent them
// with weight 1, so the unmasked mean times the contributors is the clipped sum. Central
// mode noises that sum here (the server sees only the sum, never an update); distributed
// mode's sum arrives already noised by the clients' shares. Either way it is divided by
// the number selected (public), as in DP-FedAvg.
result<void> RunController::privatize_secure_mean(secagg::SecAggResult& result,
                                                  std::size_t selected) {
  auto& run = *active_;
  const auto& dp = run.config.privacy.dp;
  if (dp.mode != protocol::DpMode::client_central &&
      dp.mode != protocol::DpMode::client_distributed) {
    return {};
  }
  const double contributors = double(result.contributors.size());
  for (auto& v : result.mean_delta) {
    v = static_cast<float>(double(v) * contributors);
  }
  const double divisor = double(std::max<std::size_t>(selected, 1));
  const double clip = run.secure_clip ? run.secure_clip->clip() : dp.clip_norm;
  privacy::CryptoNormal noise;
  if (dp.mode == protocol::DpMode::client_central) {
    double z = run.budget->noise_multiplier();
    if (run.secure_clip && z > 0) {
      auto split = privacy::update_noise_multiplier(z, run.secure_clip->count_stddev());
      if (!split) {
        return split.error();
      }
      z = *split;  // the bit count takes the rest of the round's z
    }
    if (auto ok = privacy::add_gaussian_noise(result.mean_delta, z, clip, noise); !ok) {
      return ok.error();
    }
  }
  for (auto& v : result.mean_delta) {
    v = static_cast<float>(double(v) / divisor);
  }
  if (run.secure_clip) {
    if (result.metric_sums.empty()) {
      return fail(errc::internal, "adaptive clipping: the round's sum has no unclipped-bit slot");
    }
    const bool distributed = dp.mode == protocol::DpMode::client_distributed;
    const auto& plan = run.round->secure->plan();
    auto slot = privacy::clip_report_slot(run.secure_clip->count_stddev(), distributed,
                                          secagg::required_survivors(plan), plan.clip_range);
    if (!slot) {
      return slot.error();
    }
    const double report_sum = result.metric_sums.back() * slot->scale;
    if (distributed) {
      // Already noised by the sites' shares: no party saw the bare count.
      run.secure_clip->step(report_sum / divisor + 0.5);
    } else if (auto moved = run.secure_clip->update(report_sum, divisor, noise); !moved) {
      return moved.error();
    }
    spdlog::info("run {} round {}: adaptive clip now {:.4f}", run.record.id, run.round->number,
                 run.secure_clip->clip());
  }
  return {};
}

}  // namespace fedcore::federation
