// The run controller's state while a run is active, shared by run_controller.cpp (admin
// requests, session inputs) and run_controller_rounds.cpp (driving the run's rounds).
// Private to server/federation.
#pragma once

#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "server/federation/evaluation_round.hpp"
#include "server/federation/feature_scaling.hpp"
#include "server/federation/privacy_budget.hpp"
#include "server/federation/round.hpp"
#include "server/federation/round_report.hpp"
#include "server/federation/round_stage.hpp"
#include "server/federation/run_config.hpp"
#include "server/federation/run_controller.hpp"
#include "server/federation/run_model.hpp"
#include "server/federation/secure_round.hpp"
#include "server/store/history_store.hpp"
#include "shared/privacy/adaptive_clip.hpp"
#include "shared/util/assert.hpp"
#include "shared/util/clock.hpp"

namespace fedcore::federation {

// One round between selecting and done/failed.
struct RoundInFlight {
  std::int64_t number = 0;
  RoundStage stage = RoundStage::selecting;
  std::int64_t started_ms = 0;
  Clock::steady_time deadline;
  std::optional<RoundTimer> timer;           // from selecting on: where the round's time goes
  Clock::steady_time evaluation_started;     // evaluating only
  std::optional<Round> judge;                // from training on
  std::optional<SecureRound> secure;         // secure-aggregated rounds, from training on
  RoundClose closed;                         // from aggregating on
  std::optional<double> epsilon;             // DP runs: the budget spent through this round
  std::optional<store::DpCharge> dp_charge;  // DP runs: what the accountant charged it
  // Secure rounds with federated evaluation from the masked sums: (loss, accuracy) of the
  // model the round started from, i.e. of the previous round's aggregate.
  std::optional<std::pair<double, double>> secure_evaluation;
  // Rounds due for federated evaluation, from evaluating on: the new global model the
  // participants evaluate (committed as is) and their answers.
  std::shared_ptr<const std::vector<float>> next_global;
  std::optional<EvaluationRound> evaluation;
};

// What a checkpoint write on the worker hands back: the file's reference (or why there
// is none) and when the write ran; with RunEnvironment::background_store, also the
// round's commit that followed it there.
struct WrittenCheckpoint {
  result<store::CheckpointRef> ref = fail(errc::internal, "the checkpoint was not written");
  Clock::steady_time started;
  Clock::steady_time finished;
  // Committed on the worker: the transaction's outcome (none when the write failed, or
  // the round commits on the controller's thread) and when it ran.
  std::optional<result<store::RoundRecord>> committed;
  Clock::steady_time commit_started;
  Clock::steady_time commit_finished;
  std::int64_t committed_event_id = 0;  // the "round_committed" row written with it
};

// What the round's one transaction writes. Immutable once made and shared: the worker may
// commit it while the controller's PendingCommit moves.
struct CommitRows {
  store::RoundRecord record;
  std::vector<store::ClientResult> results;
  std::vector<store::ClientEvaluation> evaluations;
  store::EventRecord committed_event;
  store::CheckpointRetention retention;  // the server's keep_checkpoints, at the round's end
};

// Holds the sink's announcements (and its writes of new events) while it lives
// (EventSink::hold_announcements): a round
// committing on the worker keeps one from its hand-off until it is settled, whichever way
// that goes (committed, failed, or dropped with the run).
class AnnouncementHold {
 public:
  explicit AnnouncementHold(EventSink& sink) : sink_(&sink) { sink.hold_announcements(); }
  AnnouncementHold(AnnouncementHold&& other) noexcept
      : sink_(std::exchange(other.sink_, nullptr)) {}
  AnnouncementHold& operator=(AnnouncementHold&& other) noexcept {
    if (this != &other) {
      release();
      sink_ = std::exchange(other.sink_, nullptr);
    }
    return *this;
  }
  AnnouncementHold(const AnnouncementHold&) = delete;
  AnnouncementHold& operator=(const AnnouncementHold&) = delete;
  ~AnnouncementHold() { release(); }

 private:
  void release() noexcept {
    if (sink_ != nullptr) {
      std::exchange(sink_, nullptr)->release_announcements();
    }
  }
  EventSink* sink_;
};

// A round between its checkpoint write and its commit: everything the commit and what
// follows it need, taken from the round before the next one replaced it. Inline commits
// use it too, with the write already done.
struct RunController::PendingCommit {
  std::int64_t number = 0;
  RoundStage stage = RoundStage::committing;  // persisting while handed off
  std::shared_ptr<const CommitRows> rows;
  std::optional<RoundTimer> timer;
  std::optional<std::pair<double, double>> secure_evaluation;
  std::future<WrittenCheckpoint> written;
  std::optional<AnnouncementHold> hold;  // while it commits on the worker
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
  // The rounds before `round`, handed off and not yet committed, oldest first
  // (run_controller.hpp, "Overlap"): at most kMaxHandedOff.
  std::deque<PendingCommit> pending;
  Clock::steady_time handed_off_since;  // when `pending` last stopped being empty
  std::optional<PrivacyBudget> budget;  // DP runs, from their first round on
  // Adaptive clipping of a secure client-level DP run (the sites clip; the bit sum arrives in
  // the masked vector's last slot): C for the next round. Plain runs keep it in DpFedAvg.
  std::optional<privacy::AdaptiveClip> secure_clip;
  // What TRAIN tells sites about feature scaling: settled once per activation, after the
  // model (feature_scaling.hpp); nullopt while a federated scale is still to be collected.
  std::optional<protocol::FeatureScaling> scaling;
  std::optional<FeatureStatsCollection> stats;  // collecting_feature_stats only
  Clock::steady_time stats_deadline;

  void move(RoundEvent event) {
    FEDCORE_ASSERT(round.has_value(), "round event without a round");
    const auto next = next_stage(round->stage, event);
    FEDCORE_ASSERT(next.has_value(), "round event not allowed in this stage");
    round->stage = *next;
  }
};

// Milliseconds from a configuration's seconds.
inline std::chrono::milliseconds seconds_to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

}  // namespace fedcore::federation
