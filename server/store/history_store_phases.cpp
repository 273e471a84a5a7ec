// HistoryStore: where rounds spent their time (round_phases, docs/schema.md), and the
// writes that do not wait for the disk themselves (events, phases) because the next
// round commit's fsync covers them.
#include <cmath>

#include "server/store/detail/rows.hpp"
#include "server/store/history_store.hpp"

namespace fedcore::store {
using namespace detail;

namespace {

// The columns, in read_phases' order (a macro: SQL must be a literal, store/sqlite.hpp).
#define FEDCORE_PHASE_COLUMNS                                                                 \
  "run_id, round, attempt, total_ms, requests_queued_ms, train_written_ms, first_update_ms, " \
  "last_update_ms, validate_ms, aggregate_ms, evaluate_ms, federated_evaluation_ms, "         \
  "checkpoint_ms, commit_ms, cpu_user_ms, cpu_system_ms, closed_ms"

result<void> require_duration(double value, std::string_view field) {
  if (!std::isfinite(value) || value < 0) {
    return fail(errc::invalid_argument,
                cat(field, " is not a finite non-negative time (", std::to_string(value), ")"));
  }
  return {};
}

result<void> require_duration(const std::optional<double>& value, std::string_view field) {
  return value ? require_duration(*value, field) : result<void>{};
}

result<void> validate_phases(const RoundPhases& p) {
  for (const auto& [value, field] :
       {std::pair{p.total_ms, "total_ms"}, std::pair{p.requests_queued_ms, "requests_queued_ms"},
        std::pair{p.validate_ms, "validate_ms"}, std::pair{p.aggregate_ms, "aggregate_ms"},
        std::pair{p.evaluate_ms, "evaluate_ms"}, std::pair{p.checkpoint_ms, "checkpoint_ms"},
        std::pair{p.commit_ms, "commit_ms"}, std::pair{p.cpu_user_ms, "cpu_user_ms"},
        std::pair{p.cpu_system_ms, "cpu_system_ms"}}) {
    if (auto ok = require_duration(value, field); !ok) {
      return ok;
    }
  }
  for (const auto& [value, field] :
       {std::pair{&p.train_written_ms, "train_written_ms"},
        std::pair{&p.first_update_ms, "first_update_ms"},
        std::pair{&p.last_update_ms, "last_update_ms"},
        std::pair{&p.federated_evaluation_ms, "federated_evaluation_ms"},
        std::pair{&p.closed_ms, "closed_ms"}}) {
    if (auto ok = require_duration(*value, field); !ok) {
      return ok;
    }
  }
  return {};
}

RoundPhases read_phases(const Statement& s) {
  RoundPhases p;
  p.run_id = s.column_int64(0);
  p.round = s.column_int64(1);
  p.attempt = s.column_int64(2);
  p.total_ms = s.column_double(3);
  p.requests_queued_ms = s.column_double(4);
  p.train_written_ms = read_optional_double(s, 5);
  p.first_update_ms = read_optional_double(s, 6);
  p.last_update_ms = read_optional_double(s, 7);
  p.validate_ms = s.column_double(8);
  p.aggregate_ms = s.column_double(9);
  p.evaluate_ms = s.column_double(10);
  p.federated_evaluation_ms = read_optional_double(s, 11);
  p.checkpoint_ms = s.column_double(12);
  p.commit_ms = s.column_double(13);
  p.cpu_user_ms = s.column_double(14);
  p.cpu_system_ms = s.column_double(15);
  p.closed_ms = read_optional_double(s, 16);
  return p;
}

}  // namespace

// synchronous=NORMAL for one statement: in WAL mode the commit is appended to the log
// but not fsync'ed; the next synchronous=FULL commit fsyncs the log file, and with it
// every frame appended before (SQLite syncs the whole -wal file). A crash of the process
// loses nothing (the frames are in the OS's page cache); only a power loss can lose rows
// written since the last full commit, and those belong to a round that was not committed.
result<void> HistoryStore::without_fsync(const std::function<result<void>()>& write) {
  if (auto ok = db_.exec("PRAGMA synchronous = NORMAL"); !ok) {
    return ok;
  }
  auto written = write();
  if (auto ok = db_.exec("PRAGMA synchronous = FULL"); !ok) {
    return ok;
  }
  return written;
}

result<void> HistoryStore::record_round_phases(const RoundPhases& phases) {
  const std::string what =
      cat("cannot record the phases of round ", phases.round, " of run ", phases.run_id);
  if (auto ok = validate_phases(phases); !ok) {
    return in(what, ok.error());
  }
  return without_fsync([&]() -> result<void> {
    auto s = db_.prepare("INSERT INTO round_phases (" FEDCORE_PHASE_COLUMNS
                         ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
                         "?14, ?15, ?16, ?17)");
    if (!s) {
      return in(what, s.error());
    }
    s->bind_int64(1, phases.run_id)
        .bind_int64(2, phases.round)
        .bind_int64(3, phases.attempt)
        .bind_double(4, phases.total_ms)
        .bind_double(5, phases.requests_queued_ms);
    bind_optional(*s, 6, phases.train_written_ms);
    bind_optional(*s, 7, phases.first_update_ms);
    bind_optional(*s, 8, phases.last_update_ms);
    s->bind_double(9, phases.validate_ms)
        .bind_double(10, phases.aggregate_ms)
        .bind_double(11, phases.evaluate_ms);
    bind_optional(*s, 12, phases.federated_evaluation_ms);
    s->bind_double(13, phases.checkpoint_ms)
        .bind_double(14, phases.commit_ms)
        .bind_double(15, phases.cpu_user_ms)
        .bind_double(16, phases.cpu_system_ms);
    bind_optional(*s, 17, phases.closed_ms);
    if (auto ok = s->run(); !ok) {
      if (ok.error().code == errc::failed_precondition) {
        // The foreign key: no such attempt.
        return fail(errc::not_found, cat(what, ": attempt ", phases.attempt, " is not recorded"));
      }
      return in(what, ok.error());
    }
    return {};
  });
}

result<std::vector<RoundPhases>> HistoryStore::list_round_phases(std::int64_t run_id) {
  if (auto run = get_run(run_id); !run) {
    return in("cannot list round phases", run.error());
  }
  auto s = db_.prepare("SELECT " FEDCORE_PHASE_COLUMNS
                       " FROM round_phases WHERE run_id = ?1 ORDER BY round, attempt");
  if (!s) {
    return in("cannot list round phases", s.error());
  }
  s->bind_int64(1, run_id);
  auto rows = read_all<RoundPhases>(*s, read_phases);
  if (!rows) {
    return in("cannot list round phases", rows.error());
  }
  return rows;
}

result<RoundPhaseTotals> HistoryStore::round_phase_totals() {
  auto s = db_.prepare(
      "SELECT count(*), total(total_ms), total(requests_queued_ms), "
      "  total(max(coalesce(last_update_ms, requests_queued_ms) - requests_queued_ms, 0)), "
      "  total(validate_ms), total(aggregate_ms), total(evaluate_ms), "
      "  total(federated_evaluation_ms), total(checkpoint_ms), total(commit_ms), "
      "  total(cpu_user_ms), total(cpu_system_ms) FROM round_phases");
  if (!s) {
    return in("cannot sum round phases", s.error());
  }
  auto stepped = s->step();
  if (!stepped) {
    return in("cannot sum round phases", stepped.error());
  }
  RoundPhaseTotals t;
  t.rounds = s->column_int64(0);
  t.total_s = s->column_double(1) / 1000;
  t.requests_s = s->column_double(2) / 1000;
  t.updates_s = s->column_double(3) / 1000;
  t.validate_s = s->column_double(4) / 1000;
  t.aggregate_s = s->column_double(5) / 1000;
  t.evaluate_s = s->column_double(6) / 1000;
  t.federated_evaluation_s = s->column_double(7) / 1000;
  t.checkpoint_s = s->column_double(8) / 1000;
  t.commit_s = s->column_double(9) / 1000;
  t.cpu_user_s = s->column_double(10) / 1000;
  t.cpu_system_s = s->column_double(11) / 1000;
  return t;
}

#undef FEDCORE_PHASE_COLUMNS

}  // namespace fedcore::store
