#include "store/history_store.hpp"

#include <array>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "store/schema.hpp"

namespace fedcore::store {
namespace {

// ---- Messages

void append(std::string& out, std::string_view text) {
  out += text;
}
void append(std::string& out, std::int64_t value) {
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
error in(const std::string& what, const error& e) {
  return fail(e.code, cat(what, ": ", e.message));
}

std::string in_quotes(std::string_view text) {
  constexpr std::size_t kMax = 80;
  if (text.size() > kMax) {
    return cat("'", text.substr(0, kMax), "...'");
  }
  return cat("'", text, "'");
}

// ---- Validation of caller input (invalid_argument, before any SQL runs)

result<void> require_json(std::string_view text, std::string_view field) {
  if (!nlohmann::json::accept(text)) {
    return fail(errc::invalid_argument, cat(field, " is not valid JSON: ", in_quotes(text)));
  }
  return {};
}

result<void> require_non_negative(std::int64_t value, std::string_view field) {
  if (value < 0) {
    return fail(errc::invalid_argument, cat(field, " is negative (", value, ")"));
  }
  return {};
}

result<void> require_page(std::int64_t limit, std::int64_t offset) {
  if (limit < 1 || limit > kMaxPageSize) {
    return fail(errc::invalid_argument,
                cat("limit ", limit, " is outside [1, ", kMaxPageSize, "]"));
  }
  return require_non_negative(offset, "offset");
}

result<void> validate_round(const RoundRecord& round, std::span<const ClientResult> results,
                            const std::optional<CheckpointRef>& checkpoint) {
  if (round.round < 1) {
    return fail(errc::invalid_argument, cat("round number ", round.round, " is not positive"));
  }
  const std::pair<std::int64_t, std::string_view> counts[] = {
      {round.selected, "selected"},    {round.accepted, "accepted"}, {round.rejected, "rejected"},
      {round.timed_out, "timed_out"},  {round.dropped, "dropped"},   {round.bytes_up, "bytes_up"},
      {round.bytes_down, "bytes_down"}};
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

void bind_optional(Statement& s, int index, const std::optional<double>& value) {
  if (value) {
    s.bind_double(index, *value);
  } else {
    s.bind_null(index);
  }
}

void bind_optional(Statement& s, int index, const std::optional<std::int64_t>& value) {
  if (value) {
    s.bind_int64(index, *value);
  } else {
    s.bind_null(index);
  }
}

// Non-optional doubles: NULL is how SQLite stored a NaN.
double read_double(const Statement& s, int column) {
  return s.column_is_null(column) ? std::numeric_limits<double>::quiet_NaN()
                                  : s.column_double(column);
}

std::optional<double> read_optional_double(const Statement& s, int column) {
  if (s.column_is_null(column)) {
    return std::nullopt;
  }
  return s.column_double(column);
}

std::optional<std::int64_t> read_optional_int64(const Statement& s, int column) {
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

ClientRecord read_client(const Statement& s) {
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

result<RunRecord> read_run(const Statement& s) {
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

#define FEDCORE_ROUND_COLUMNS                                                        \
  "d.run_id, d.round, d.attempt, d.state, d.started_ms, d.finished_ms, d.selected, " \
  "d.accepted, d.rejected, d.timed_out, d.dropped, d.train_loss, d.train_accuracy, " \
  "d.eval_loss, d.eval_accuracy, d.fed_eval_loss, d.fed_eval_accuracy, d.bytes_up, " \
  "d.bytes_down, d.failure_reason, d.checkpoint_id "

result<RoundRecord> read_round(const Statement& s) {
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
  return r;
}

result<ClientResult> read_client_result(const Statement& s) {
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

#define FEDCORE_CHECKPOINT_COLUMNS "id, run_id, round, path, size_bytes, crc32, layout_fingerprint "

CheckpointRecord read_checkpoint(const Statement& s) {
  CheckpointRecord c;
  c.id = s.column_int64(0);
  c.run_id = s.column_int64(1);
  c.round = s.column_int64(2);
  c.ref.path = s.column_text(3);
  c.ref.size_bytes = s.column_int64(4);
  c.ref.crc32 = static_cast<std::uint32_t>(s.column_int64(5));
  c.ref.layout_fingerprint = s.column_text(6);
  return c;
}

EventRecord read_event(const Statement& s) {
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
result<std::vector<std::string>> text_column(Database& db, Sql sql) {
  auto statement = db.prepare(sql);
  if (!statement) {
    return statement.error();
  }
  return read_all<std::string>(*statement, [](const Statement& s) { return s.column_text(0); });
}

result<bool> run_exists(Database& db, std::int64_t run_id) {
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

error run_not_found(std::int64_t run_id) {
  return fail(errc::not_found, cat("run ", run_id, " does not exist"));
}

// For read methods: an empty answer is fine for a run that exists and not_found for one
// that does not.
result<void> require_run(Database& db, std::int64_t run_id, const std::string& what) {
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

}  // namespace

// ---- Opening

result<HistoryStore> HistoryStore::open(const std::string& path, const StoreOptions& options) {
  const std::string what = cat("cannot open history ", in_quotes(path));
  auto db = Database::open(path, OpenMode::read_write_create);
  if (!db) {
    return db.error();
  }
  db->set_busy_timeout(options.busy_timeout);
  // Foreign keys are off by default in SQLite, and the setting is per connection.
  if (auto ok = db->exec("PRAGMA foreign_keys = ON"); !ok) {
    return in(what, ok.error());
  }
  // WAL: readers (dashboards) never block the writer, and a commit is one append to the
  // log. The pragma answers the mode actually in force; in-memory databases stay "memory".
  auto mode = text_column(*db, "PRAGMA journal_mode = WAL");
  if (!mode) {
    return in(what, mode.error());
  }
  if (mode->empty() || ((*mode)[0] != "wal" && (*mode)[0] != "memory")) {
    return fail(errc::failed_precondition, cat(what, ": SQLite refused WAL mode (journal mode ",
                                               in_quotes(mode->empty() ? "" : (*mode)[0]), ")"));
  }
  // FULL: the WAL is fsync'ed at every commit, so a returned commit survives power loss.
  if (auto ok = db->exec("PRAGMA synchronous = FULL"); !ok) {
    return in(what, ok.error());
  }
  // quick_check is O(file size) but skips the index cross-checks of integrity_check;
  // enough to refuse to build on a damaged file.
  auto check = text_column(*db, "PRAGMA quick_check");
  if (!check) {
    return in(cat(what, ": quick_check"), check.error());
  }
  if (check->empty() || (*check)[0] != "ok") {
    return fail(errc::data_loss, cat(what, ": the file is damaged (quick_check: ",
                                     check->empty() ? "no answer" : (*check)[0], ")"));
  }
  if (auto ok = migrate(*db); !ok) {
    return in(what, ok.error());
  }
  return HistoryStore(std::move(*db));
}

result<HistoryStore> HistoryStore::open_read_only(const std::string& path,
                                                  const StoreOptions& options) {
  const std::string what = cat("cannot open history ", in_quotes(path), " for reading");
  auto db = Database::open(path, OpenMode::read_only);
  if (!db) {
    return db.error();
  }
  db->set_busy_timeout(options.busy_timeout);
  if (auto ok = require_current_schema(*db); !ok) {
    return in(what, ok.error());
  }
  return HistoryStore(std::move(*db));
}

// ---- Clients

result<void> HistoryStore::upsert_client(const ClientRecord& client) {
  const std::string what = cat("cannot store client ", in_quotes(client.id));
  if (client.id.empty()) {
    return fail(errc::invalid_argument, "cannot store a client with an empty id");
  }
  for (const auto& check : {require_non_negative(client.samples, "samples"),
                            require_json(client.input_shape_json, "input_shape_json"),
                            require_json(client.capabilities_json, "capabilities_json")}) {
    if (!check) {
      return in(what, check.error());
    }
  }
  auto s = db_.prepare(
      "INSERT INTO clients (id, first_seen_ms, last_seen_ms, samples, input_shape_json, "
      "                     capabilities_json, online) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
      "ON CONFLICT (id) DO UPDATE SET "
      "  last_seen_ms = max(last_seen_ms, excluded.last_seen_ms), "
      "  samples = excluded.samples, "
      "  input_shape_json = excluded.input_shape_json, "
      "  capabilities_json = excluded.capabilities_json, "
      "  online = excluded.online");
  if (!s) {
    return in(what, s.error());
  }
  s->bind_text(1, client.id)
      .bind_int64(2, client.first_seen_ms)
      .bind_int64(3, client.last_seen_ms)
      .bind_int64(4, client.samples)
      .bind_text(5, client.input_shape_json)
      .bind_text(6, client.capabilities_json)
      .bind_int64(7, client.online ? 1 : 0);
  if (auto ok = s->run(); !ok) {
    return in(what, ok.error());
  }
  return {};
}

result<void> HistoryStore::set_client_online(const std::string& id, bool online,
                                             std::int64_t now_ms) {
  const std::string what =
      cat("cannot mark client ", in_quotes(id), online ? " online" : " offline");
  auto s = db_.prepare(
      "UPDATE clients SET online = ?2, last_seen_ms = max(last_seen_ms, ?3) WHERE id = ?1");
  if (!s) {
    return in(what, s.error());
  }
  s->bind_text(1, id).bind_int64(2, online ? 1 : 0).bind_int64(3, now_ms);
  if (auto ok = s->run(); !ok) {
    return in(what, ok.error());
  }
  if (db_.changes() == 0) {
    return fail(errc::not_found, cat("client ", in_quotes(id), " does not exist"));
  }
  return {};
}

result<ClientRecord> HistoryStore::get_client(const std::string& id) {
  const std::string what = cat("cannot read client ", in_quotes(id));
  auto s = db_.prepare("SELECT " FEDCORE_CLIENT_COLUMNS "FROM clients AS c WHERE c.id = ?1");
  if (!s) {
    return in(what, s.error());
  }
  s->bind_text(1, id);
  auto stepped = s->step();
  if (!stepped) {
    return in(what, stepped.error());
  }
  if (*stepped == StepResult::done) {
    return fail(errc::not_found, cat("client ", in_quotes(id), " does not exist"));
  }
  return read_client(*s);
}

result<std::vector<ClientRecord>> HistoryStore::list_clients() {
  auto s = db_.prepare("SELECT " FEDCORE_CLIENT_COLUMNS "FROM clients AS c ORDER BY c.id");
  if (!s) {
    return in("cannot list clients", s.error());
  }
  auto rows = read_all<ClientRecord>(*s, read_client);
  if (!rows) {
    return in("cannot list clients", rows.error());
  }
  return rows;
}

// ---- Runs

result<RunRecord> HistoryStore::create_run(const std::string& name, const std::string& config_json,
                                           std::int64_t rounds_total, std::int64_t now_ms) {
  const std::string what = cat("cannot create run ", in_quotes(name));
  if (rounds_total < 1) {
    return fail(errc::invalid_argument,
                cat(what, ": rounds_total ", rounds_total, " is not positive"));
  }
  if (auto ok = require_json(config_json, "config_json"); !ok) {
    return in(what, ok.error());
  }
  auto s = db_.prepare(
      "INSERT INTO runs (name, config_json, state, rounds_total, last_round, created_ms, "
      "                  updated_ms, error) "
      "VALUES (?1, ?2, 'pending', ?3, 0, ?4, ?4, '')");
  if (!s) {
    return in(what, s.error());
  }
  s->bind_text(1, name).bind_text(2, config_json).bind_int64(3, rounds_total).bind_int64(4, now_ms);
  if (auto ok = s->run(); !ok) {
    return in(what, ok.error());
  }
  RunRecord run;
  run.id = db_.last_insert_rowid();
  run.name = name;
  run.config_json = config_json;
  run.state = RunState::pending;
  run.rounds_total = rounds_total;
  run.created_ms = now_ms;
  run.updated_ms = now_ms;
  return run;
}

result<RunRecord> HistoryStore::get_run(std::int64_t id) {
  const std::string what = cat("cannot read run ", id);
  auto s = db_.prepare("SELECT " FEDCORE_RUN_COLUMNS "FROM runs WHERE id = ?1");
  if (!s) {
    return in(what, s.error());
  }
  s->bind_int64(1, id);
  auto stepped = s->step();
  if (!stepped) {
    return in(what, stepped.error());
  }
  if (*stepped == StepResult::done) {
    return run_not_found(id);
  }
  auto run = read_run(*s);
  if (!run) {
    return in(what, run.error());
  }
  return run;
}

result<std::vector<RunRecord>> HistoryStore::list_runs(std::int64_t limit, std::int64_t offset) {
  if (auto ok = require_page(limit, offset); !ok) {
    return in("cannot list runs", ok.error());
  }
  auto s =
      db_.prepare("SELECT " FEDCORE_RUN_COLUMNS "FROM runs ORDER BY id DESC LIMIT ?1 OFFSET ?2");
  if (!s) {
    return in("cannot list runs", s.error());
  }
  s->bind_int64(1, limit).bind_int64(2, offset);
  auto rows = read_all<RunRecord>(*s, read_run);
  if (!rows) {
    return in("cannot list runs", rows.error());
  }
  return rows;
}

result<void> HistoryStore::set_run_state(std::int64_t id, RunState state, const std::string& error,
                                         std::int64_t now_ms) {
  const std::string what = cat("cannot set run ", id, " to ", to_string(state));
  // Read and write under the write lock, so no other writer finishes the run in between.
  auto transaction = Transaction::begin(db_, TransactionMode::immediate);
  if (!transaction) {
    return in(what, transaction.error());
  }
  auto current = get_run(id);
  if (!current) {
    return current.error();
  }
  if (current->state == RunState::finished) {
    return fail(errc::failed_precondition, cat(what, ": the run is finished, which is final"));
  }
  auto s = db_.prepare("UPDATE runs SET state = ?2, error = ?3, updated_ms = ?4 WHERE id = ?1");
  if (!s) {
    return in(what, s.error());
  }
  s->bind_int64(1, id).bind_text(2, to_string(state)).bind_text(3, error).bind_int64(4, now_ms);
  if (auto ok = s->run(); !ok) {
    return in(what, ok.error());
  }
  if (auto ok = transaction->commit(); !ok) {
    return in(what, ok.error());
  }
  return {};
}

// ---- Rounds

result<RoundRecord> HistoryStore::commit_round(const RoundRecord& round,
                                               std::span<const ClientResult> results,
                                               const std::optional<CheckpointRef>& checkpoint) {
  return write_round(round, results, checkpoint, RoundState::committed);
}

result<RoundRecord> HistoryStore::record_failed_round(const RoundRecord& round,
                                                      std::span<const ClientResult> results) {
  return write_round(round, results, std::nullopt, RoundState::failed);
}

result<RoundRecord> HistoryStore::write_round(const RoundRecord& round,
                                              std::span<const ClientResult> results,
                                              const std::optional<CheckpointRef>& checkpoint,
                                              RoundState state) {
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
        "  failure_reason, checkpoint_id) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, "
        "        ?18, ?19, ?20, ?21)");
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

  if (auto ok = transaction->commit(); !ok) {
    return in(what, ok.error());
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

// ---- Checkpoints

result<std::optional<CheckpointRecord>> HistoryStore::latest_checkpoint(std::int64_t run_id) {
  return first_row_of_run<CheckpointRecord>(
      db_, run_id, cat("cannot read the latest checkpoint of run ", run_id),
      "SELECT " FEDCORE_CHECKPOINT_COLUMNS
      "FROM checkpoints WHERE run_id = ?1 ORDER BY round DESC LIMIT 1",
      read_checkpoint);
}

result<std::vector<CheckpointRecord>> HistoryStore::list_checkpoints(std::int64_t run_id) {
  return rows_of_run<CheckpointRecord>(
      db_, run_id, cat("cannot list the checkpoints of run ", run_id),
      "SELECT " FEDCORE_CHECKPOINT_COLUMNS "FROM checkpoints WHERE run_id = ?1 ORDER BY round",
      read_checkpoint);
}

result<std::vector<std::string>> HistoryStore::referenced_checkpoint_paths() {
  auto lines = text_column(db_, "SELECT path FROM checkpoints ORDER BY path");
  if (!lines) {
    return in("cannot list checkpoint paths", lines.error());
  }
  return lines;
}

// ---- Events

result<std::int64_t> HistoryStore::append_event(const EventRecord& event) {
  const std::string what = cat("cannot append event ", in_quotes(event.kind));
  if (event.kind.empty()) {
    return fail(errc::invalid_argument, "cannot append an event with an empty kind");
  }
  if (auto ok = require_json(event.detail_json, "detail_json"); !ok) {
    return in(what, ok.error());
  }
  auto s = db_.prepare(
      "INSERT INTO events (time_ms, kind, run_id, round, client_id, detail_json) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  if (!s) {
    return in(what, s.error());
  }
  s->bind_int64(1, event.time_ms).bind_text(2, event.kind);
  bind_optional(*s, 3, event.run_id);
  bind_optional(*s, 4, event.round);
  s->bind_text(5, event.client_id).bind_text(6, event.detail_json);
  if (auto ok = s->run(); !ok) {
    return in(what, ok.error());
  }
  return db_.last_insert_rowid();
}

result<std::vector<EventRecord>> HistoryStore::list_events(std::int64_t after_id,
                                                           std::int64_t limit) {
  if (auto ok = require_page(limit, 0); !ok) {
    return in("cannot list events", ok.error());
  }
  auto s = db_.prepare(
      "SELECT id, time_ms, kind, run_id, round, client_id, detail_json FROM events "
      "WHERE id > ?1 ORDER BY id LIMIT ?2");
  if (!s) {
    return in("cannot list events", s.error());
  }
  s->bind_int64(1, after_id).bind_int64(2, limit);
  auto rows = read_all<EventRecord>(*s, read_event);
  if (!rows) {
    return in("cannot list events", rows.error());
  }
  return rows;
}

// ---- Maintenance

result<bool> HistoryStore::integrity_check() {
  auto lines = text_column(db_, "PRAGMA integrity_check");
  if (!lines) {
    // Corruption bad enough to stop the check is still an answer to "is it intact?".
    if (lines.error().code == errc::data_loss) {
      return false;
    }
    return in("cannot check the history's integrity", lines.error());
  }
  return !lines->empty() && (*lines)[0] == "ok";
}

#undef FEDCORE_CLIENT_COLUMNS
#undef FEDCORE_RUN_COLUMNS
#undef FEDCORE_ROUND_COLUMNS
#undef FEDCORE_CHECKPOINT_COLUMNS

}  // namespace fedcore::store
