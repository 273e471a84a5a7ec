// RunController, the run's feature scale (feature_scaling.hpp): settling it once per
// activation, and the feature-statistics exchange before a federated run's first round.
#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/federation/detail/active_run.hpp"
#include "server/federation/feature_scaling.hpp"
#include "server/federation/run_controller.hpp"

namespace fedcore::federation {
namespace {
using json = nlohmann::json;
}  // namespace

// After the model is prepared: the configured mode for this model, and for a federated
// scale the one stored with the run, if any. Only a federated run without a stored scale
// is left unsettled; its first round begins with the exchange.
void RunController::settle_feature_scaling() {
  auto& run = *active_;
  const auto choice = choose_feature_scaling(run.config, run.model->spec.input_shape);
  const auto mode_name = std::string(protocol::scaling_mode_name(choice.mode));
  if (choice.mode != protocol::ScalingMode::federated) {
    use_feature_scaling({choice.mode, {}, {}},
                        json{{"mode", mode_name}, {"reason", choice.reason}}.dump());
    return;
  }
  auto stored = env_.store.feature_scale(run.record.id);
  if (!stored) {
    end_run(store::RunState::failed,
            "cannot read the run's feature scale: " + stored.error().message);
    return;
  }
  if (*stored) {
    const auto& scale = **stored;
    spdlog::info("run {}: the federated feature scale of {} sites ({} samples) is reused",
                 run.record.id, scale.sites, scale.samples);
    use_feature_scaling({protocol::ScalingMode::federated, scale.mean, scale.stddev},
                        json{{"mode", mode_name},
                             {"features", scale.mean.size()},
                             {"sites", scale.sites},
                             {"samples", scale.samples},
                             {"stored", true}}
                            .dump());
    return;
  }
  if (run.record.last_round > 0) {
    // Rounds were trained before this server kept scales: a new scale now would change the
    // meaning of every weight of the model. The run stays as it began.
    use_feature_scaling(
        {protocol::ScalingMode::none, {}, {}},
        json{{"mode", "none"},
             {"reason", "the run's first rounds were trained without a feature scale"}}
            .dump());
  }
}

// Sets what TRAIN carries, scales the server's own test set the same way, and tells.
void RunController::use_feature_scaling(protocol::FeatureScaling scaling,
                                        const std::string& detail_json) {
  auto& run = *active_;
  run.model->scale_server_test_set(scaling);
  spdlog::info("run {}: feature scaling {}", run.record.id, detail_json);
  event("feature_scaling", run.record.id, std::nullopt, "", detail_json);
  run.scaling = std::move(scaling);
}

// Asks the clients round 1 would select for their statistics.
void RunController::begin_feature_stats() {
  auto& run = *active_;
  const auto selected = select_clients(run.record.last_round + 1);
  std::map<std::string, std::string> nonces;
  std::string unable;
  std::size_t unable_count = 0;
  for (const auto& c : selected) {
    if (c.reports_feature_stats) {
      nonces[c.client_id] = env_.entropy.nonce();
    } else if (++unable_count <= 5) {
      unable += (unable.empty() ? "" : ", ") + c.client_id;
    }
  }
  if (unable_count > 0) {
    // A daemon older than the exchange would train on the features as loaded whatever the
    // others do: one scale for every site, or none.
    use_feature_scaling(
        {protocol::ScalingMode::none, {}, {}},
        json{{"mode", "none"},
             {"reason", std::to_string(unable_count) + " of " + std::to_string(selected.size()) +
                            " selected sites cannot apply a feature scale (" + unable +
                            (unable_count > 5 ? ", ..." : "") +
                            "); the run trains on the features as loaded"}}
            .dump());
    return;
  }
  const auto features = static_cast<std::uint32_t>(run.model->spec.input_shape.front());
  const auto quorum = static_cast<std::size_t>(std::max<std::int64_t>(run.config.min_clients, 1));
  run.stats.emplace(run.record.id, features, nonces, quorum);
  for (const auto& [id, nonce] : nonces) {
    env_.sessions.send(id, protocol::MessageType::feature_stats_request,
                       protocol::to_metadata(run.stats->request_for(id)));
  }
  run.phase = RunPhase::collecting_feature_stats;
  run.stats_deadline = env_.clock.steady() + seconds_to_ms(run.config.round_timeout_s);
  spdlog::info("run {}: asking {} of {} selected sites for feature statistics", run.record.id,
               nonces.size(), selected.size());
  event("feature_stats_requested", run.record.id, std::nullopt, "",
        json{{"clients", nonces.size()}, {"selected", selected.size()}, {"features", features}}
            .dump());
}

// Everyone answered or the deadline passed: combine, store, go on to the first round. Too
// few reports pause the run, as a round without quorum does.
void RunController::finish_feature_stats() {
  auto& run = *active_;
  auto combined = run.stats->combine();
  const auto asked = run.stats->asked();
  const auto reports = run.stats->reports();
  run.stats.reset();
  if (!combined) {
    end_run(store::RunState::paused, "feature statistics: " + combined.error().message);
    return;
  }
  store::FeatureScaleRecord record;
  record.run_id = run.record.id;
  record.mean = combined->scale.mean;
  record.stddev = combined->scale.stddev;
  record.sites = static_cast<std::int64_t>(reports);
  record.samples = static_cast<std::int64_t>(combined->samples);
  record.created_ms = env_.clock.wall_ms();
  if (auto saved = env_.store.save_feature_scale(record); !saved) {
    end_run(store::RunState::paused, "cannot store the feature scale: " + saved.error().message);
    return;
  }
  use_feature_scaling(federated_scaling(combined->scale), json{{"mode", "federated"},
                                                               {"features", record.mean.size()},
                                                               {"sites", reports},
                                                               {"asked", asked},
                                                               {"samples", record.samples}}
                                                              .dump());
  run.phase = RunPhase::waiting_for_clients;
}

void RunController::on_feature_stats(const std::string& client_id, const protocol::Frame& frame) {
  const bool collecting = active_ && active_->stats;
  auto report = protocol::parse_feature_stats_report(frame.metadata);
  auto kept = !collecting ? result<void>(fail(errc::failed_precondition,
                                              "no feature statistics request is in progress"))
              : !report   ? result<void>(report.error())
                          : active_->stats->on_report(client_id, *report);
  if (!kept) {
    spdlog::warn("client '{}': feature statistics refused: {}", client_id, kept.error().message);
    event("feature_stats_refused", active_ ? std::optional(active_->record.id) : std::nullopt,
          std::nullopt, client_id, json{{"reason", kept.error().message}}.dump());
    if (collecting) {
      active_->stats->on_no_answer(client_id);  // a bad report is that client's answer
    }
    return;
  }
  spdlog::info("run {}: feature statistics from '{}'", active_->record.id, client_id);
}

// A client asked for statistics refused (ERROR) or left: it will not report. False when no
// exchange waits for it.
bool RunController::feature_stats_not_given(const std::string& client_id, const std::string& why) {
  if (!active_ || !active_->stats || !active_->stats->on_no_answer(client_id)) {
    return false;
  }
  spdlog::warn("run {}: client '{}' gives no feature statistics: {}", active_->record.id, client_id,
               why);
  event("feature_stats_refused", active_->record.id, std::nullopt, client_id,
        json{{"reason", why}}.dump());
  return true;
}

}  // namespace fedcore::federation
