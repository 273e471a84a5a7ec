// The rows of the history store: checking caller input before any SQL runs, binding and
// reading the columns that have no direct SQLite type, the column lists and row readers
// shared by the queries of history_store.cpp and history_store_rounds.cpp. Private to
// server/store.
#pragma once

#include <array>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/store/detail/dp_charge_text.hpp"
#include "server/store/history_store.hpp"
#include "server/store/sqlite.hpp"

namespace fedcore::store::detail {

// ---- Messages

inline void append(std::string& out, std::string_view text) {
  out += text;
}
inline void append(std::string& out, std::int64_t value) {
  out += std::to_string(value);
}

// Concatenates text and integers. Built with += rather than operator+ chains, which make
// g++ 12 at -O3 emit a false -Wrestrict warning.
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  (append(out, parts), ...);
  return out;
}

// The same error with what the store was doing in front of its message.
inline error in(const std::string& what, const error& e) {
  return fail(e.code, cat(what, ": ", e.message));
}

inline std::string in_quotes(std::string_view text) {
  constexpr std::size_t kMax = 80;
  if (text.size() > kMax) {
    return cat("'", text.substr(0, kMax), "...'");
  }
  return cat("'", text, "'");
}

// ---- Validation of caller input (invalid_argument, before any SQL runs)

inline result<void> require_json(std::string_view text, std::string_view field) {
  if (!nlohmann::json::accept(text)) {
    return fail(errc::invalid_argument, cat(field, " is not valid JSON: ", in_quotes(text)));
  }
  return {};
}

inline result<void> require_non_negative(std::int64_t value, std::string_view field) {
  if (value < 0) {
    return fail(errc::invalid_argument, cat(field, " is negative (", value, ")"));
  }
  return {};
}

inline result<void> require_page(std::int64_t limit, std::int64_t offset) {
  if (limit < 1 || limit > kMaxPageSize) {
    return fail(errc::invalid_argument,
                cat("limit ", limit, " is outside [1, ", kMaxPageSize, "]"));
  }
  return require_non_negative(offset, "offset");
}

inline result<void> validate_round(const RoundRecord& round, std::span<const ClientResult> results,
                                   const std::optional<CheckpointRef>& checkpoint) {
  if (round.round < 1) {
    return fail(errc::invalid_argument, cat("round number ", round.round, " is not positive"));
  }
  const std::pair<std::int64_t, std::string_view> counts[] = {
      {round.selected, "selected"},     {round.accepted, "accepted"}, {round.rejected, "rejected"},
      {round.timed_out, "timed_out"},   {round.dropped, "dropped"},   {round.bytes_up, "bytes_up"},
      {round.bytes_down, "bytes_down"}, {round.late, "late"}};
  for (const auto& [value, field] : counts) {
    if (auto ok = require_non_negative(value, field); !ok) {
      return ok;
    }
  }
  for (const auto& r : results) {
    if (r.client_id.empty()) {
      return fail(errc::invalid_argument, "a client result has an empty client id");
    }
    for (const auto& [value, field] :
         {std::pair<std::int64_t, std::string_view>{r.samples, "samples"},
          {r.bytes_up, "bytes_up"},
          {r.bytes_down, "bytes_down"},
          {r.eval_samples, "eval_samples"}}) {
      if (auto ok = require_non_negative(value, field); !ok) {
        return in(cat("client result for ", in_quotes(r.client_id)), ok.error());
      }
    }
  }
  if (checkpoint) {
    if (checkpoint->path.empty()) {
      return fail(errc::invalid_argument, "the checkpoint path is empty");
    }
    if (auto ok = require_non_negative(checkpoint->size_bytes, "checkpoint size"); !ok) {
      return ok;
    }
  }
  return {};
}

// ---- Binding and reading the columns that have no direct SQLite type

inline void bind_optional(Statement& s, int index, const std::optional<double>& value) {
  if (value) {
    s.bind_double(index, *value);
  } else {
    s.bind_null(index);
  }
}

inline void bind_optional(Statement& s, int index, const std::optional<std::int64_t>& value) {
  if (value) {
    s.bind_int64(index, *value);
  } else {
    s.bind_null(index);
  }
}

// Non-optional doubles: NULL is how SQLite stored a NaN.
inline double read_double(const Statement& s, int column) {
  return s.column_is_null(column) ? std::numeric_limits<double>::quiet_NaN()
                                  : s.column_double(column);
}

inline std::optional<double> read_optional_double(const Statement& s, int column) {
  if (s.column_is_null(column)) {
    return std::nullopt;
  }
  return s.column_double(column);
}

inline std::optional<std::int64_t> read_optional_int64(const Statement& s, int column) {
  if (s.column_is_null(column)) {
    return std::nullopt;
  }
  return s.column_int64(column);
}

// Enum columns are CHECK-constrained, so an unknown name means the file was altered.
template <class Enum, std::size_t N>
result<Enum> read_enum(const Statement& s, int column, const std::array<std::string_view, N>& names,
                       std::string_view what) {
  const auto text = s.column_text(column);
  if (auto value = enum_from_name<Enum>(names, text)) {
    return *value;
  }
  return fail(errc::data_loss, cat("unknown ", what, " ", in_quotes(text), " in the history"));
}

// ---- Column lists shared by several queries (adjacent literals, so the SQL stays a
// compile-time constant).

#define FEDCORE_CLIENT_COLUMNS                                                                 \
  "c.id, c.first_seen_ms, c.last_seen_ms, c.samples, c.input_shape_json, "                     \
  "c.capabilities_json, c.online, "                                                            \
  "(SELECT count(*) FROM client_results AS r JOIN rounds AS d USING (run_id, round, attempt) " \
  " WHERE r.client_id = c.id AND r.status = 'ok' AND d.state = 'committed') "

inline ClientRecord read_client(const Statement& s) {
  ClientRecord c;
  c.id = s.column_text(0);
  c.first_seen_ms = s.column_int64(1);
  c.last_seen_ms = s.column_int64(2);
  c.samples = s.column_int64(3);
  c.input_shape_json = s.column_text(4);
  c.capabilities_json = s.column_text(5);
  c.online = s.column_int64(6) != 0;
  c.rounds_joined = s.column_int64(7);
  return c;
}

#define FEDCORE_RUN_COLUMNS \
  "id, name, config_json, state, rounds_total, last_round, created_ms, updated_ms, error "

inline result<RunRecord> read_run(const Statement& s) {
  RunRecord r;
  r.id = s.column_int64(0);
  r.name = s.column_text(1);
  r.config_json = s.column_text(2);
  auto state = read_enum<RunState>(s, 3, kRunStateNames, "run state");
  if (!state) {
    return state.error();
  }
  r.state = *state;
  r.rounds_total = s.column_int64(4);
  r.last_round = s.column_int64(5);
  r.created_ms = s.column_int64(6);
  r.updated_ms = s.column_int64(7);
  r.error = s.column_text(8);
  return r;
}

#define FEDCORE_ROUND_COLUMNS                                                          \
  "d.run_id, d.round, d.attempt, d.state, d.started_ms, d.finished_ms, d.selected, "   \
  "d.accepted, d.rejected, d.timed_out, d.dropped, d.train_loss, d.train_accuracy, "   \
  "d.eval_loss, d.eval_accuracy, d.fed_eval_loss, d.fed_eval_accuracy, d.bytes_up, "   \
  "d.bytes_down, d.failure_reason, d.checkpoint_id, d.secure_aggregation, d.epsilon, " \
  "d.late, d.dp_charge "

inline result<RoundRecord> read_round(const Statement& s) {
  RoundRecord r;
  r.run_id = s.column_int64(0);
  r.round = s.column_int64(1);
  r.attempt = s.column_int64(2);
  auto state = read_enum<RoundState>(s, 3, kRoundStateNames, "round state");
  if (!state) {
    return state.error();
  }
  r.state = *state;
  r.started_ms = s.column_int64(4);
  r.finished_ms = s.column_int64(5);
  r.selected = s.column_int64(6);
  r.accepted = s.column_int64(7);
  r.rejected = s.column_int64(8);
  r.timed_out = s.column_int64(9);
  r.dropped = s.column_int64(10);
  r.train_loss = read_double(s, 11);
  r.train_accuracy = read_double(s, 12);
  r.eval_loss = read_optional_double(s, 13);
  r.eval_accuracy = read_optional_double(s, 14);
  r.fed_eval_loss = read_optional_double(s, 15);
  r.fed_eval_accuracy = read_optional_double(s, 16);
  r.bytes_up = s.column_int64(17);
  r.bytes_down = s.column_int64(18);
  r.failure_reason = s.column_text(19);
  r.checkpoint_id = read_optional_int64(s, 20);
  r.secure_aggregation = s.column_int64(21) != 0;
  r.epsilon = read_optional_double(s, 22);
  r.late = s.column_int64(23);
  if (!s.column_is_null(24)) {
    auto charge = parse_dp_charge(s.column_text(24));
    if (!charge) {
      return charge.error();
    }
    r.dp_charge = std::move(*charge);
  }
  return r;
}

inline result<ClientResult> read_client_result(const Statement& s) {
  ClientResult r;
  r.client_id = s.column_text(0);
  auto status = read_enum<ResultStatus>(s, 1, kResultStatusNames, "client result status");
  if (!status) {
    return status.error();
  }
  r.status = *status;
  r.reason = s.column_text(2);
  r.samples = s.column_int64(3);
  r.loss = read_double(s, 4);
  r.accuracy = read_double(s, 5);
  r.duration_s = read_double(s, 6);
  r.bytes_up = s.column_int64(7);
  r.bytes_down = s.column_int64(8);
  r.eval_loss = read_optional_double(s, 9);
  r.eval_accuracy = read_optional_double(s, 10);
  r.eval_samples = s.column_int64(11);
  return r;
}

#define FEDCORE_CHECKPOINT_COLUMNS \
  "id, run_id, round, path, size_bytes, crc32, layout_fingerprint, removed_ms "

inline CheckpointRecord read_checkpoint(const Statement& s) {
  CheckpointRecord c;
  c.id = s.column_int64(0);
  c.run_id = s.column_int64(1);
  c.round = s.column_int64(2);
  c.ref.path = s.column_text(3);
  c.ref.size_bytes = s.column_int64(4);
  c.ref.crc32 = static_cast<std::uint32_t>(s.column_int64(5));
  c.ref.layout_fingerprint = s.column_text(6);
  if (!s.column_is_null(7)) {
    c.removed_ms = s.column_int64(7);
  }
  return c;
}

inline EventRecord read_event(const Statement& s) {
  EventRecord e;
  e.id = s.column_int64(0);
  e.time_ms = s.column_int64(1);
  e.kind = s.column_text(2);
  e.run_id = read_optional_int64(s, 3);
  e.round = read_optional_int64(s, 4);
  e.client_id = s.column_text(5);
  e.detail_json = s.column_text(6);
  return e;
}

// Steps through every row of `s`, converting each with `read` (which returns T or
// result<T>).
template <class T, class Read>
result<std::vector<T>> read_all(Statement& s, Read read) {
  std::vector<T> rows;
  for (;;) {
    auto stepped = s.step();
    if (!stepped) {
      return stepped.error();
    }
    if (*stepped == StepResult::done) {
      return rows;
    }
    if constexpr (std::is_same_v<decltype(read(s)), T>) {
      rows.push_back(read(s));
    } else {
      auto row = read(s);
      if (!row) {
        return row.error();
      }
      rows.push_back(std::move(*row));
    }
  }
}

// The first column of every row as text: PRAGMA answers, path lists.
inline result<std::vector<std::string>> text_column(Database& db, Sql sql) {
  auto statement = db.prepare(sql);
  if (!statement) {
    return statement.error();
  }
  return read_all<std::string>(*statement, [](const Statement& s) { return s.column_text(0); });
}

inline result<bool> run_exists(Database& db, std::int64_t run_id) {
  auto statement = db.prepare("SELECT 1 FROM runs WHERE id = ?1");
  if (!statement) {
    return statement.error();
  }
  statement->bind_int64(1, run_id);
  auto stepped = statement->step();
  if (!stepped) {
    return stepped.error();
  }
  return *stepped == StepResult::row;
}

inline error run_not_found(std::int64_t run_id) {
  return fail(errc::not_found, cat("run ", run_id, " does not exist"));
}

// For read methods: an empty answer is fine for a run that exists and not_found for one
// that does not.
inline result<void> require_run(Database& db, std::int64_t run_id, const std::string& what) {
  auto exists = run_exists(db, run_id);
  if (!exists) {
    return in(what, exists.error());
  }
  if (!*exists) {
    return run_not_found(run_id);
  }
  return {};
}

// The rows `sql` selects for run `run_id` (bound as ?1), each read by `read`. An empty
// answer is fine for a run that exists and not_found for one that does not.
template <class T, class Read>
result<std::vector<T>> rows_of_run(Database& db, std::int64_t run_id, const std::string& what,
                                   Sql sql, Read read) {
  auto s = db.prepare(sql);
  if (!s) {
    return in(what, s.error());
  }
  s->bind_int64(1, run_id);
  auto rows = read_all<T>(*s, read);
  if (!rows) {
    return in(what, rows.error());
  }
  if (rows->empty()) {
    if (auto known = require_run(db, run_id, what); !known) {
      return known.error();
    }
  }
  return rows;
}

// The first of those rows, if any (for queries that select at most one).
template <class T, class Read>
result<std::optional<T>> first_row_of_run(Database& db, std::int64_t run_id,
                                          const std::string& what, Sql sql, Read read) {
  auto rows = rows_of_run<T>(db, run_id, what, sql, read);
  if (!rows) {
    return rows.error();
  }
  if (rows->empty()) {
    return std::optional<T>();
  }
  return std::optional<T>(std::move(rows->front()));
}

}  // namespace fedcore::store::detail
