// HistoryStore: federated evaluation (round_evaluations, docs/schema.md) — the rows written
// with a committed round, the queries over them, and the clients that took part in a run
// (who evaluates its final model).
#include "server/store/detail/rows.hpp"
#include "server/store/history_store.hpp"

namespace fedcore::store {
using namespace detail;

namespace {

result<void> validate_evaluation(const ClientEvaluation& e) {
  if (e.client_id.empty()) {
    return fail(errc::invalid_argument, "an evaluation has an empty client id");
  }
  const std::string who = cat("the evaluation of ", in_quotes(e.client_id));
  if (auto ok = require_non_negative(e.samples, "samples"); !ok) {
    return in(who, ok.error());
  }
  const bool has_metrics = e.loss.has_value() || e.accuracy.has_value() || e.samples > 0;
  if (e.status == EvaluationStatus::ok && !(e.loss && e.accuracy)) {
    return fail(errc::invalid_argument, cat(who, " is ok but has no loss or accuracy"));
  }
  if (e.status != EvaluationStatus::ok && has_metrics) {
    return fail(errc::invalid_argument,
                cat(who, " is ", to_string(e.status), " but carries metrics"));
  }
  return {};
}

result<ClientEvaluation> read_evaluation(const Statement& s) {
  ClientEvaluation e;
  e.round = s.column_int64(0);
  e.client_id = s.column_text(1);
  auto status = read_enum<EvaluationStatus>(s, 2, kEvaluationStatusNames, "evaluation status");
  if (!status) {
    return status.error();
  }
  e.status = *status;
  e.message = s.column_text(3);
  e.loss = read_optional_double(s, 4);
  e.accuracy = read_optional_double(s, 5);
  e.samples = s.column_int64(6);
  return e;
}

}  // namespace

result<void> HistoryStore::insert_evaluations(std::int64_t run_id, std::int64_t round,
                                              std::span<const ClientEvaluation> evaluations) {
  if (evaluations.empty()) {
    return {};
  }
  for (const auto& e : evaluations) {
    if (auto ok = validate_evaluation(e); !ok) {
      return ok;
    }
  }
  auto s = db_.prepare(
      "INSERT INTO round_evaluations (run_id, round, client_id, status, message, loss, "
      "  accuracy, samples) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  if (!s) {
    return s.error();
  }
  for (const auto& e : evaluations) {
    s->reset();
    s->bind_int64(1, run_id)
        .bind_int64(2, round)
        .bind_text(3, e.client_id)
        .bind_text(4, to_string(e.status))
        .bind_text(5, e.message);
    bind_optional(*s, 6, e.loss);
    bind_optional(*s, 7, e.accuracy);
    s->bind_int64(8, e.samples);
    if (auto ok = s->run(); !ok) {
      return in(cat("evaluation of ", in_quotes(e.client_id)), ok.error());
    }
  }
  return {};
}

result<std::vector<ClientEvaluation>> HistoryStore::list_evaluations(
    std::int64_t run_id, std::optional<std::int64_t> round) {
  const std::string what = cat("cannot list the evaluations of run ", run_id);
  auto s = db_.prepare(
      "SELECT round, client_id, status, message, loss, accuracy, samples "
      "FROM round_evaluations WHERE run_id = ?1 AND (?2 IS NULL OR round = ?2) "
      "ORDER BY round, client_id");
  if (!s) {
    return in(what, s.error());
  }
  s->bind_int64(1, run_id);
  bind_optional(*s, 2, round);
  auto rows = read_all<ClientEvaluation>(*s, read_evaluation);
  if (!rows) {
    return in(what, rows.error());
  }
  if (rows->empty()) {
    if (auto known = require_run(db_, run_id, what); !known) {
      return known.error();
    }
  }
  return rows;
}

result<std::vector<std::string>> HistoryStore::run_participants(std::int64_t run_id) {
  return rows_of_run<std::string>(
      db_, run_id, cat("cannot list the participants of run ", run_id),
      "SELECT DISTINCT r.client_id FROM client_results AS r "
      "JOIN rounds AS d USING (run_id, round, attempt) "
      "WHERE r.run_id = ?1 AND r.status = 'ok' AND d.state = 'committed' "
      "ORDER BY r.client_id",
      [](const Statement& row) { return row.column_text(0); });
}

result<void> HistoryStore::set_federated_evaluation(std::int64_t run_id, std::int64_t round,
                                                    double loss, double accuracy) {
  const std::string what =
      cat("cannot record the federated evaluation of round ", round, " of run ", run_id);
  auto s = db_.prepare(
      "UPDATE rounds SET fed_eval_loss = ?3, fed_eval_accuracy = ?4 "
      "WHERE run_id = ?1 AND round = ?2 AND state = 'committed'");
  if (!s) {
    return in(what, s.error());
  }
  s->bind_int64(1, run_id).bind_int64(2, round).bind_double(3, loss).bind_double(4, accuracy);
  if (auto ok = s->run(); !ok) {
    return in(what, ok.error());
  }
  if (db_.changes() == 0) {
    if (auto known = require_run(db_, run_id, what); !known) {
      return known.error();
    }
    return fail(errc::not_found, cat(what, ": the round is not committed"));
  }
  return {};
}

}  // namespace fedcore::store
