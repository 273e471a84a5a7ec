// HistoryStore's rounds: the one transaction that commits a round (or records a failed
// attempt) with its client results and checkpoint reference, and the queries over rounds.
#include "server/store/detail/dp_charge_text.hpp"
#include "server/store/detail/rows.hpp"
#include "server/store/history_store.hpp"
#include "server/store/schema.hpp"
#include "shared/util/test_point.hpp"

namespace fedcore::store {
using namespace detail;

// ---- Rounds

result<RoundRecord> HistoryStore::commit_round(const RoundRecord& round,
                                               std::span<const ClientResult> results,
                                               const std::optional<CheckpointRef>& checkpoint,
                                               std::span<const ClientEvaluation> evaluations,
                                               EventRecord* event,
                                               const CheckpointRetention& retention,
                                               std::vector<std::string>* removed_paths) {
  return write_round(round, results, checkpoint, RoundState::committed, evaluations, event,
                     retention, removed_paths);
}

result<RoundRecord> HistoryStore::record_failed_round(const RoundRecord& round,
                                                      std::span<const ClientResult> results,
                                                      EventRecord* event) {
  return write_round(round, results, std::nullopt, RoundState::failed, {}, event);
}

result<RoundRecord> HistoryStore::write_round(
    const RoundRecord& round, std::span<const ClientResult> results,
    const std::optional<CheckpointRef>& checkpoint, RoundState state,
    std::span<const ClientEvaluation> evaluations, EventRecord* event,
    const CheckpointRetention& retention, std::vector<std::string>* removed_paths) {
  const std::string what =
      cat(state == RoundState::committed ? "cannot commit round " : "cannot record failed round ",
          round.round, " of run ", round.run_id);
  if (auto ok = validate_round(round, results, checkpoint); !ok) {
    return in(what, ok.error());
  }
  // IMMEDIATE takes the write lock before the checks below read last_round, so no other
  // writer can commit the same round between the check and the insert. Every early
  // return rolls the transaction back.
  auto transaction = Transaction::begin(db_, TransactionMode::immediate);
  if (!transaction) {
    return in(what, transaction.error());
  }
  // Where crash tests stop a commit (shared/util/test_point.hpp); inert in production.
  const auto mark = [&](std::string_view point) {
    if (state == RoundState::committed) {
      test_point(point, std::to_string(round.round));
    }
  };
  mark("round_commit.begin");
  auto run = get_run(round.run_id);
  if (!run) {
    return in(what, run.error());
  }
  if (run->state != RunState::running && run->state != RunState::paused) {
    return fail(errc::failed_precondition,
                cat(what, ": the run is ", to_string(run->state),
                    "; rounds are recorded only while it is running or paused"));
  }
  if (round.round != run->last_round + 1) {
    return fail(errc::failed_precondition,
                cat(what, ": the run's last committed round is ", run->last_round,
                    ", so the next round is ", run->last_round + 1));
  }
  if (round.round > run->rounds_total) {
    return fail(errc::failed_precondition,
                cat(what, ": the run has only ", run->rounds_total, " rounds"));
  }

  RoundRecord stored = round;
  stored.state = state;
  stored.checkpoint_id = std::nullopt;
  if (checkpoint) {
    auto s = db_.prepare(
        "INSERT INTO checkpoints (run_id, round, path, size_bytes, crc32, layout_fingerprint) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    if (!s) {
      return in(what, s.error());
    }
    s->bind_int64(1, round.run_id)
        .bind_int64(2, round.round)
        .bind_text(3, checkpoint->path)
        .bind_int64(4, checkpoint->size_bytes)
        .bind_int64(5, checkpoint->crc32)
        .bind_text(6, checkpoint->layout_fingerprint);
    if (auto ok = s->run(); !ok) {
      return in(cat(what, ": checkpoint ", in_quotes(checkpoint->path)), ok.error());
    }
    stored.checkpoint_id = db_.last_insert_rowid();
  }

  {
    auto s = db_.prepare(
        "SELECT coalesce(max(attempt), 0) + 1 FROM rounds WHERE run_id = ?1 AND round = ?2");
    if (!s) {
      return in(what, s.error());
    }
    s->bind_int64(1, round.run_id).bind_int64(2, round.round);
    auto stepped = s->step();
    if (!stepped) {
      return in(what, stepped.error());
    }
    stored.attempt = s->column_int64(0);
  }

  {
    auto s = db_.prepare(
        "INSERT INTO rounds (run_id, round, attempt, state, started_ms, finished_ms, selected, "
        "  accepted, rejected, timed_out, dropped, train_loss, train_accuracy, eval_loss, "
        "  eval_accuracy, fed_eval_loss, fed_eval_accuracy, bytes_up, bytes_down, "
        "  failure_reason, checkpoint_id, secure_aggregation, epsilon, late, dp_charge) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, "
        "        ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25)");
    if (!s) {
      return in(what, s.error());
    }
    s->bind_int64(1, stored.run_id)
        .bind_int64(2, stored.round)
        .bind_int64(3, stored.attempt)
        .bind_text(4, to_string(stored.state))
        .bind_int64(5, stored.started_ms)
        .bind_int64(6, stored.finished_ms)
        .bind_int64(7, stored.selected)
        .bind_int64(8, stored.accepted)
        .bind_int64(9, stored.rejected)
        .bind_int64(10, stored.timed_out)
        .bind_int64(11, stored.dropped)
        .bind_double(12, stored.train_loss)
        .bind_double(13, stored.train_accuracy);
    bind_optional(*s, 14, stored.eval_loss);
    bind_optional(*s, 15, stored.eval_accuracy);
    bind_optional(*s, 16, stored.fed_eval_loss);
    bind_optional(*s, 17, stored.fed_eval_accuracy);
    s->bind_int64(18, stored.bytes_up)
        .bind_int64(19, stored.bytes_down)
        .bind_text(20, stored.failure_reason);
    bind_optional(*s, 21, stored.checkpoint_id);
    s->bind_int64(22, stored.secure_aggregation ? 1 : 0);
    bind_optional(*s, 23, stored.epsilon);
    s->bind_int64(24, stored.late);
    if (stored.dp_charge) {
      s->bind_text(25, detail::dp_charge_text(*stored.dp_charge));
    } else {
      s->bind_null(25);
    }
    if (auto ok = s->run(); !ok) {
      return in(what, ok.error());
    }
  }

  {
    auto s = db_.prepare(
        "INSERT INTO client_results (run_id, round, attempt, client_id, status, reason, "
        "  samples, loss, accuracy, duration_s, bytes_up, bytes_down, eval_loss, "
        "  eval_accuracy, eval_samples) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)");
    if (!s) {
      return in(what, s.error());
    }
    for (const auto& r : results) {
      s->reset();
      s->bind_int64(1, stored.run_id)
          .bind_int64(2, stored.round)
          .bind_int64(3, stored.attempt)
          .bind_text(4, r.client_id)
          .bind_text(5, to_string(r.status))
          .bind_text(6, r.reason)
          .bind_int64(7, r.samples)
          .bind_double(8, r.loss)
          .bind_double(9, r.accuracy)
          .bind_double(10, r.duration_s)
          .bind_int64(11, r.bytes_up)
          .bind_int64(12, r.bytes_down);
      bind_optional(*s, 13, r.eval_loss);
      bind_optional(*s, 14, r.eval_accuracy);
      s->bind_int64(15, r.eval_samples);
      if (auto ok = s->run(); !ok) {
        return in(cat(what, ": client result for ", in_quotes(r.client_id)), ok.error());
      }
    }
  }

  if (auto ok = insert_evaluations(stored.run_id, stored.round, evaluations); !ok) {
    return in(what, ok.error());
  }

  if (state == RoundState::committed) {
    auto s = db_.prepare(
        "UPDATE runs SET last_round = ?2, updated_ms = max(updated_ms, ?3) WHERE id = ?1");
    if (!s) {
      return in(what, s.error());
    }
    s->bind_int64(1, stored.run_id).bind_int64(2, stored.round).bind_int64(3, stored.finished_ms);
    if (auto ok = s->run(); !ok) {
      return in(what, ok.error());
    }
  }

  // Retention: the rows of checkpoints now older than the newest keep_last rounds.
  std::vector<std::string> removed;
  if (state == RoundState::committed && retention.keep_last > 0 &&
      stored.round > retention.keep_last) {
    auto s = db_.prepare(
        "UPDATE checkpoints SET removed_ms = ?3 "
        "WHERE run_id = ?1 AND round <= ?2 AND removed_ms IS NULL RETURNING path");
    if (!s) {
      return in(what, s.error());
    }
    s->bind_int64(1, stored.run_id)
        .bind_int64(2, stored.round - retention.keep_last)
        .bind_int64(3, retention.now_ms);
    while (true) {
      auto stepped = s->step();
      if (!stepped) {
        return in(cat(what, ": checkpoint retention"), stepped.error());
      }
      if (*stepped != StepResult::row) {
        break;
      }
      removed.push_back(s->column_text(0));
    }
  }

  std::optional<std::int64_t> event_id;
  if (event != nullptr) {
    auto id = insert_event(*event);
    if (!id) {
      return in(what, id.error());
    }
    event_id = *id;
  }

  mark("round_commit.before_commit");
  if (auto ok = transaction->commit(); !ok) {
    return in(what, ok.error());
  }
  mark("round_commit.end");
  if (event_id) {
    event->id = *event_id;
  }
  if (removed_paths != nullptr) {
    removed_paths->insert(removed_paths->end(), removed.begin(), removed.end());
  }
  return stored;
}

result<std::optional<RoundRecord>> HistoryStore::last_committed_round(std::int64_t run_id) {
  return first_row_of_run<RoundRecord>(
      db_, run_id, cat("cannot read the last round of run ", run_id),
      "SELECT " FEDCORE_ROUND_COLUMNS
      "FROM rounds AS d JOIN runs AS u ON u.id = d.run_id "
      "WHERE d.run_id = ?1 AND d.round = u.last_round AND d.state = 'committed'",
      read_round);
}

result<std::vector<RoundRecord>> HistoryStore::list_rounds(std::int64_t run_id) {
  return rows_of_run<RoundRecord>(
      db_, run_id, cat("cannot list the rounds of run ", run_id),
      "SELECT " FEDCORE_ROUND_COLUMNS
      "FROM rounds AS d WHERE d.run_id = ?1 ORDER BY d.round, d.attempt",
      read_round);
}

result<std::vector<ClientResult>> HistoryStore::list_client_results(
    std::int64_t run_id, std::int64_t round, std::optional<std::int64_t> attempt) {
  const std::string what =
      cat("cannot list the client results of round ", round, " of run ", run_id);
  // Which attempt: the one asked for, if it exists; otherwise the committed one, else the
  // latest. Results are written with their round row and never change afterwards, so
  // reading them with a second statement is consistent.
  auto pick = db_.prepare(
      "SELECT attempt FROM rounds WHERE run_id = ?1 AND round = ?2 "
      "  AND (?3 IS NULL OR attempt = ?3) "
      "ORDER BY state = 'committed' DESC, attempt DESC LIMIT 1");
  if (!pick) {
    return in(what, pick.error());
  }
  pick->bind_int64(1, run_id).bind_int64(2, round);
  bind_optional(*pick, 3, attempt);
  auto stepped = pick->step();
  if (!stepped) {
    return in(what, stepped.error());
  }
  if (*stepped == StepResult::done) {
    if (auto known = require_run(db_, run_id, what); !known) {
      return known.error();
    }
    if (attempt) {
      return fail(errc::not_found, cat("attempt ", *attempt, " of round ", round, " of run ",
                                       run_id, " does not exist"));
    }
    return fail(errc::not_found, cat("round ", round, " of run ", run_id, " does not exist"));
  }
  const std::int64_t chosen = pick->column_int64(0);

  auto s = db_.prepare(
      "SELECT client_id, status, reason, samples, loss, accuracy, duration_s, bytes_up, "
      "  bytes_down, eval_loss, eval_accuracy, eval_samples "
      "FROM client_results WHERE run_id = ?1 AND round = ?2 AND attempt = ?3 "
      "ORDER BY client_id");
  if (!s) {
    return in(what, s.error());
  }
  s->bind_int64(1, run_id).bind_int64(2, round).bind_int64(3, chosen);
  auto rows = read_all<ClientResult>(*s, read_client_result);
  if (!rows) {
    return in(what, rows.error());
  }
  return rows;
}

}  // namespace fedcore::store
