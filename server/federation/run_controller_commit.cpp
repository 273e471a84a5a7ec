// RunController, committing a round: the new global model, its checkpoint file (inline, or
// on the background worker while the next round runs), and the one transaction that
// commits the round (run_controller.hpp, "Durability" and "Overlap").
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/federation/detail/active_run.hpp"
#include "server/federation/dp_fedavg.hpp"
#include "server/federation/round_report.hpp"
#include "server/federation/run_controller.hpp"
#include "server/federation/run_model.hpp"
#include "server/federation/server_state_file.hpp"

namespace fedcore::federation {
namespace {
using json = nlohmann::json;

// The round's one transaction, wherever it runs; `event_id` gets the id of its
// "round_committed" row. Then the checkpoint files retention retired in that transaction
// are deleted: only now, once no kept row names them and the commit is durable. A file
// left behind (a crash here, a refused unlink) is named by no kept row, so the orphan
// sweep at the next start removes it.
result<store::RoundRecord> commit_rows(store::HistoryStore& store, const CommitRows& rows,
                                       const store::CheckpointRef& ref, std::int64_t& event_id) {
  auto event = rows.committed_event;
  std::vector<std::string> retired;
  auto committed = store.commit_round(rows.record, rows.results, ref, rows.evaluations, &event,
                                      rows.retention, &retired);
  event_id = event.id;
  for (const auto& path : retired) {
    std::error_code ec;
    if (!std::filesystem::remove(path, ec) && ec) {
      spdlog::warn(
          "run {}: checkpoint retention could not delete {}: {} (the next start's "
          "orphan sweep will)",
          rows.record.run_id, path, ec.message());
    }
  }
  return committed;
}
}  // namespace

// committing: the strategy's output becomes the global model, its checkpoint is durable
// before the transaction that commits the round row and names it. A round that is not the
// run's last hands the write to the background worker when there is one (persisting) and
// the next round starts at once; the round commits in settle_pending_commits.
void RunController::commit_round() {
  const bool overlap = env_.background != nullptr && !active_->config.manual &&
                       active_->round->number < active_->config.rounds;
  // Rounds commit in order: those handed off before this one first. One that hands off
  // too may leave kMaxHandedOff - 1 of them writing, unless announcements have waited
  // long enough (class comment, "Overlap").
  const bool held_too_long =
      !active_->pending.empty() && active_->pending.front().hold.has_value() &&
      env_.clock.steady() - active_->handed_off_since >= kMaxHoldingAnnouncements;
  if (!settle_pending_commits(overlap && !held_too_long ? kMaxHandedOff - 1 : 0)) {
    return;  // a write or commit failed, and this round, built on its model, went with it
  }
  auto& run = *active_;
  auto& round = *run.round;
  auto& model = *run.model;
  round.timer->closed();
  auto report =
      make_round_report(*round.judge, round.closed, round.started_ms, env_.clock.wall_ms());
  report.record.secure_aggregation = round.secure.has_value();
  report.record.epsilon = round.epsilon;
  report.record.dp_charge = round.dp_charge;
  auto evaluations = take_evaluations(report.record);
  // The judge viewed the old global model; it is not used past this point.
  round.judge.reset();
  if (round.evaluation) {
    round.timer->federated_evaluation(round.evaluation_started);
  }
  const auto finishing = round.timer->now();
  model.global = round.next_global ? round.next_global
                                   : std::make_shared<const std::vector<float>>(
                                         model.next_global(model.strategy->finish_round()));
  if (!round.next_global) {
    round.timer->add(&store::RoundPhases::aggregate_ms, finishing);
  }
  if (auto* dp = dynamic_cast<DpFedAvg*>(model.strategy.get()); dp && dp->noise_failed()) {
    run.move(RoundEvent::commit_failed);
    end_run(store::RunState::paused, "the DP noise source failed; the round was not committed");
    return;
  }
  if (report.record.dp_charge) {
    // Adaptive clipping's C after this round, so a resumed run continues from it.
    report.record.dp_charge->clip_norm = adaptive_clip_norm();
  }
  const auto evaluating = round.timer->now();
  if (auto eval = model.evaluate_global()) {
    report.record.eval_loss = eval->loss;
    report.record.eval_accuracy = eval->accuracy;
  }
  round.timer->add(&store::RoundPhases::evaluate_ms, evaluating);

  PendingCommit commit;
  commit.number = round.number;
  // The round's "committed" event is written in the round's transaction: every event of
  // the round is durable when the round is (one fsync for the round, docs/schema.md).
  commit.rows = std::make_shared<const CommitRows>(
      CommitRows{std::move(report.record), std::move(report.results), std::move(evaluations),
                 round_event("round_committed", json{{"accepted", round.closed.accepted},
                                                     {"rejected", round.closed.rejected},
                                                     {"timed_out", round.closed.timed_out},
                                                     {"late", round.closed.late}}
                                                    .dump()),
                 store::CheckpointRetention{env_.keep_checkpoints, env_.clock.wall_ms()}});
  commit.timer.emplace(*round.timer);
  commit.secure_evaluation = round.secure_evaluation;
  // With a second connection the worker commits the round itself, right after its file:
  // the commit's fsync then waits on the worker, not on the thread that receives the next
  // round's updates. The controller learns the outcome when it settles the round
  // (finish_commit).
  store::HistoryStore* commit_store = overlap ? env_.background_store : nullptr;
  // The write reads only what nothing changes until this round commits: the new global
  // model (its own shared copy), the model's layout and spec, the clock and the disks.
  auto promise = std::make_shared<std::promise<WrittenCheckpoint>>();
  commit.written = promise->get_future();
  // The write in two parts, the file then the commit, so that the server can write the
  // next round's file while this round commits (BackgroundWork's two-part start). The
  // outcome travels from one to the other in `written`, which only one part touches at a
  // time (the second starts after the first has returned).
  auto written = std::make_shared<WrittenCheckpoint>();
  // The strategy's state after this round (a server optimizer's moments) is an immutable
  // snapshot too: the next round's finish_round makes a new one.
  auto write_file = [written, &model, &clock = env_.clock, disks = &disks(), global = model.global,
                     state = model.strategy->state(), run_id = run.record.id,
                     number = round.number] {
    written->started = clock.steady();
    try {
      written->ref = model.write_checkpoint(run_id, number, *global, disks, state.get());
    } catch (const std::exception& e) {
      written->ref = fail(errc::internal, std::string("writing the checkpoint: ") + e.what());
    }
    written->finished = clock.steady();
  };
  auto commit_and_tell = [written, promise, &clock = env_.clock, commit_store, rows = commit.rows] {
    if (commit_store != nullptr && written->ref) {
      written->commit_started = clock.steady();
      written->committed =
          commit_rows(*commit_store, *rows, *written->ref, written->committed_event_id);
      written->commit_finished = clock.steady();
    }
    promise->set_value(std::move(*written));
  };
  if (!overlap) {
    write_file();
    commit_and_tell();
    finish_commit(commit);
    return;
  }
  commit.timer->stop();  // the round's own time ends here; the next round's begins
  if (commit_store != nullptr) {
    // Before the worker can take the write lock: events written from here on may get ids
    // after the round's own, and must not be announced before it.
    commit.hold.emplace(env_.events);
  }
  env_.background->start(std::move(write_file), std::move(commit_and_tell));
  run.move(RoundEvent::handed_off);
  commit.stage = round.stage;
  if (run.pending.empty()) {
    run.handed_off_since = env_.clock.steady();
  }
  run.pending.push_back(std::move(commit));
}

bool RunController::settle_pending_commits(std::size_t at_most_left) {
  while (active_ && !active_->pending.empty()) {
    auto& oldest = active_->pending.front();
    if (oldest.written.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      if (active_->pending.size() <= at_most_left) {
        return true;
      }
      // This round's write and commit, not those of the round after it, which may still
      // be writing its file while this thread has a round in flight to serve.
      env_.background->finish_until([&oldest] {
        return oldest.written.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
      });
    }
    PendingCommit commit(std::move(active_->pending.front()));
    active_->pending.pop_front();
    const auto generation = generation_;
    if (!finish_commit(commit) || !active_ || generation_ != generation) {
      return false;
    }
  }
  return active_ != nullptr;
}

bool RunController::finish_commit(PendingCommit& commit) {
  auto& run = *active_;
  const bool handed_off = commit.stage == RoundStage::persisting;
  // An inline commit moves the round in flight; a handed-off one only its own record.
  const auto move = [&](RoundEvent event) {
    if (!handed_off) {
      run.move(event);
      commit.stage = run.round->stage;
      return;
    }
    const auto next = next_stage(commit.stage, event);
    FEDCORE_ASSERT(next.has_value(), "a persisting round commits or fails");
    commit.stage = *next;
  };
  const auto failed = [&](const error& failure, FailedWrite what) {
    move(RoundEvent::commit_failed);
    // The rounds handed off after this one were built on its model: they go too, once
    // their writes have returned (their jobs read the run's model). Their commits, if they
    // ran, found this round missing and wrote nothing.
    if (!run.pending.empty()) {
      env_.background->finish();
      for (const auto& later : run.pending) {
        spdlog::warn(
            "run {} round {}: abandoned: it started from round {}'s model, which "
            "could not be committed",
            run.record.id, later.number, commit.number);
      }
      run.pending.clear();
    }
    if (handed_off && run.round) {
      spdlog::warn(
          "run {} round {}: abandoned: it started from round {}'s model, which could not "
          "be committed",
          run.record.id, run.round->number, commit.number);
    }
    pause_for_failed_write(failure, what, commit.number);
    return false;
  };
  auto written = commit.written.get();
  commit.timer->add(&store::RoundPhases::checkpoint_ms, written.started, written.finished);
  if (!written.ref) {
    return failed(written.ref.error(), FailedWrite::checkpoint_file);
  }
  std::int64_t event_id = written.committed_event_id;
  auto committed = [&]() -> result<store::RoundRecord> {
    if (written.committed) {  // on the worker, right after the file
      commit.timer->add(&store::RoundPhases::commit_ms, written.commit_started,
                        written.commit_finished);
      return std::move(*written.committed);
    }
    const auto committing = commit.timer->now();
    auto done = commit_rows(env_.store, *commit.rows, *written.ref, event_id);
    commit.timer->add(&store::RoundPhases::commit_ms, committing);
    return done;
  }();
  if (!committed) {
    return failed(committed.error(), FailedWrite::round_commit);
  }
  move(RoundEvent::committed);
  run.record.last_round = commit.number;
  forget_previous_state(commit.number);
  record_phases(*commit.timer, commit.number, committed->attempt);
  record_secure_evaluation(commit.number, commit.secure_evaluation);
  const auto& record = commit.rows->record;
  spdlog::info(
      "run {} round {} committed: {} of {} updates accepted, train loss {:.4f}{}", run.record.id,
      commit.number, record.accepted, record.selected, record.train_loss,
      record.eval_accuracy ? ", server accuracy " + std::to_string(*record.eval_accuracy) : "");
  auto event = commit.rows->committed_event;
  event.id = event_id;
  env_.events.announce(event);
  if (env_.hooks.round_committed) {
    env_.hooks.round_committed(run.record.id, *committed);  // last: it may end the run
  }
  return true;
}

// The run resumes from its last committed round's state file only: the one before it is
// deleted (the moments of a 10M-parameter FedAdam run are 80 MB a round). Best effort: a
// file left by a failed delete is only disk space.
void RunController::forget_previous_state(std::int64_t committed) {
  const auto& model = *active_->model;
  if (committed <= 1 || model.strategy->state() == nullptr) {
    return;
  }
  std::error_code ec;
  const auto previous = server_state_path(model.run_dir, committed - 1);
  if (!std::filesystem::remove(previous, ec) && ec) {
    spdlog::warn("run {}: could not delete the strategy state of round {} ({}): {}",
                 active_->record.id, committed - 1, previous.string(), ec.message());
  }
}

std::int64_t RunController::next_round_number() const {
  return active_->pending.empty() ? active_->record.last_round + 1
                                  : active_->pending.back().number + 1;
}

void RunController::record_phases(const RoundTimer& timer, std::int64_t round,
                                  std::int64_t attempt) {
  const auto run_id = active_->record.id;
  const auto phases = timer.phases(run_id, round, attempt);
  if (auto saved = env_.store.record_round_phases(phases); !saved) {
    spdlog::warn("run {} round {}: could not record where its time went: {}", run_id, round,
                 saved.error().message);
  }
}

}  // namespace fedcore::federation
