#include "server/store/history_store.hpp"

#include "server/store/detail/rows.hpp"
#include "server/store/schema.hpp"

namespace fedcore::store {
using namespace detail;

// ---- Opening

namespace {

// What every read-write connection to a history needs, whichever opened it first.
result<void> configure_writer(Database& db, const std::string& what, const StoreOptions& options) {
  db.set_busy_timeout(options.busy_timeout);
  // Foreign keys are off by default in SQLite, and the setting is per connection.
  if (auto ok = db.exec("PRAGMA foreign_keys = ON"); !ok) {
    return in(what, ok.error());
  }
  // WAL: readers (dashboards) never block the writer, and a commit is one append to the
  // log. The pragma answers the mode actually in force; in-memory databases stay "memory".
  auto mode = text_column(db, "PRAGMA journal_mode = WAL");
  if (!mode) {
    return in(what, mode.error());
  }
  if (mode->empty() || ((*mode)[0] != "wal" && (*mode)[0] != "memory")) {
    return fail(errc::failed_precondition, cat(what, ": SQLite refused WAL mode (journal mode ",
                                               in_quotes(mode->empty() ? "" : (*mode)[0]), ")"));
  }
  // FULL: the WAL is fsync'ed at every commit, so a returned commit survives power loss.
  if (auto ok = db.exec("PRAGMA synchronous = FULL"); !ok) {
    return in(what, ok.error());
  }
  return {};
}

}  // namespace

result<HistoryStore> HistoryStore::open(const std::string& path, const StoreOptions& options) {
  const std::string what = cat("cannot open history ", in_quotes(path));
  auto db = Database::open(path, OpenMode::read_write_create);
  if (!db) {
    return db.error();
  }
  if (auto ok = configure_writer(*db, what, options); !ok) {
    return ok.error();
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

result<HistoryStore> HistoryStore::open_second_connection(const HistoryStore& first,
                                                          const StoreOptions& options) {
  const auto& path = first.path();
  const std::string what = cat("cannot open a second connection to history ", in_quotes(path));
  if (first.in_memory()) {
    return fail(errc::failed_precondition,
                cat(what, ": an in-memory history has no second connection"));
  }
  auto db = Database::open(path, OpenMode::read_write);
  if (!db) {
    return db.error();
  }
  if (auto ok = configure_writer(*db, what, options); !ok) {
    return ok.error();
  }
  if (auto ok = require_current_schema(*db); !ok) {
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
  auto lines =
      text_column(db_, "SELECT path FROM checkpoints WHERE removed_ms IS NULL ORDER BY path");
  if (!lines) {
    return in("cannot list checkpoint paths", lines.error());
  }
  return lines;
}

// ---- Events

result<std::int64_t> HistoryStore::append_event(const EventRecord& event) {
  std::int64_t id = 0;
  auto written = without_fsync([&]() -> result<void> {
    auto inserted = insert_event(event);
    if (!inserted) {
      return inserted.error();
    }
    id = *inserted;
    return {};
  });
  if (!written) {
    return written.error();
  }
  return id;
}

// One lock and one append to the log for a batch (the server writes the events of a round
// that were kept back while the previous round committed on its writer thread).
result<void> HistoryStore::append_events(std::span<EventRecord> events) {
  if (events.empty()) {
    return {};
  }
  std::vector<std::int64_t> ids;
  ids.reserve(events.size());
  auto written = without_fsync([&]() -> result<void> {
    auto transaction = Transaction::begin(db_, TransactionMode::immediate);
    if (!transaction) {
      return in(cat("cannot append ", events.size(), " events"), transaction.error());
    }
    for (const auto& event : events) {
      auto inserted = insert_event(event);
      if (!inserted) {
        return inserted.error();
      }
      ids.push_back(*inserted);
    }
    return transaction->commit();
  });
  if (!written) {
    return written.error();
  }
  for (std::size_t i = 0; i < events.size(); ++i) {
    events[i].id = ids[i];
  }
  return {};
}

result<std::int64_t> HistoryStore::insert_event(const EventRecord& event) {
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
