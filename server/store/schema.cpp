#include "server/store/schema.hpp"

#include <string>

#include "shared/util/assert.hpp"

namespace fedcore::store {
namespace {

// Migration 1: the whole history. STRICT tables make SQLite enforce the column types
// instead of silently storing, say, text in an INTEGER column. Doubles that may be NaN
// are nullable because SQLite stores NaN as NULL.
constexpr Migration kMigrations[] = {
    {1, R"sql(
CREATE TABLE clients (
  id                TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
  first_seen_ms     INTEGER NOT NULL,
  last_seen_ms      INTEGER NOT NULL,
  samples           INTEGER NOT NULL CHECK (samples >= 0),
  input_shape_json  TEXT    NOT NULL,
  capabilities_json TEXT    NOT NULL,
  online            INTEGER NOT NULL CHECK (online IN (0, 1))
) STRICT;

CREATE TABLE runs (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  name         TEXT    NOT NULL,
  config_json  TEXT    NOT NULL,
  state        TEXT    NOT NULL
               CHECK (state IN ('pending', 'running', 'paused', 'finished', 'failed', 'stopped')),
  rounds_total INTEGER NOT NULL CHECK (rounds_total >= 1),
  last_round   INTEGER NOT NULL DEFAULT 0 CHECK (last_round BETWEEN 0 AND rounds_total),
  created_ms   INTEGER NOT NULL,
  updated_ms   INTEGER NOT NULL,
  error        TEXT    NOT NULL DEFAULT ''
) STRICT;

CREATE TABLE checkpoints (
  id                 INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id             INTEGER NOT NULL REFERENCES runs (id),
  round              INTEGER NOT NULL CHECK (round >= 1),
  path               TEXT    NOT NULL UNIQUE CHECK (path <> ''),
  size_bytes         INTEGER NOT NULL CHECK (size_bytes >= 0),
  crc32              INTEGER NOT NULL CHECK (crc32 BETWEEN 0 AND 4294967295),
  layout_fingerprint TEXT    NOT NULL,
  UNIQUE (run_id, round)
) STRICT;

CREATE TABLE rounds (
  run_id            INTEGER NOT NULL REFERENCES runs (id),
  round             INTEGER NOT NULL CHECK (round >= 1),
  attempt           INTEGER NOT NULL CHECK (attempt >= 1),
  state             TEXT    NOT NULL CHECK (state IN ('committed', 'failed')),
  started_ms        INTEGER NOT NULL,
  finished_ms       INTEGER NOT NULL,
  selected          INTEGER NOT NULL CHECK (selected >= 0),
  accepted          INTEGER NOT NULL CHECK (accepted >= 0),
  rejected          INTEGER NOT NULL CHECK (rejected >= 0),
  timed_out         INTEGER NOT NULL CHECK (timed_out >= 0),
  dropped           INTEGER NOT NULL CHECK (dropped >= 0),
  train_loss        REAL,
  train_accuracy    REAL,
  eval_loss         REAL,
  eval_accuracy     REAL,
  fed_eval_loss     REAL,
  fed_eval_accuracy REAL,
  bytes_up          INTEGER NOT NULL CHECK (bytes_up >= 0),
  bytes_down        INTEGER NOT NULL CHECK (bytes_down >= 0),
  failure_reason    TEXT    NOT NULL DEFAULT '',
  checkpoint_id     INTEGER UNIQUE REFERENCES checkpoints (id),
  PRIMARY KEY (run_id, round, attempt),
  CHECK (state = 'committed' OR checkpoint_id IS NULL)
) STRICT;

-- At most one committed attempt per round, whatever the code above does.
CREATE UNIQUE INDEX rounds_one_commit ON rounds (run_id, round) WHERE state = 'committed';

CREATE TABLE client_results (
  run_id        INTEGER NOT NULL,
  round         INTEGER NOT NULL,
  attempt       INTEGER NOT NULL,
  client_id     TEXT    NOT NULL REFERENCES clients (id),
  status        TEXT    NOT NULL CHECK (status IN ('ok', 'rejected', 'timeout', 'dropped')),
  reason        TEXT    NOT NULL DEFAULT '',
  samples       INTEGER NOT NULL CHECK (samples >= 0),
  loss          REAL,
  accuracy      REAL,
  duration_s    REAL,
  bytes_up      INTEGER NOT NULL CHECK (bytes_up >= 0),
  bytes_down    INTEGER NOT NULL CHECK (bytes_down >= 0),
  eval_loss     REAL,
  eval_accuracy REAL,
  eval_samples  INTEGER NOT NULL DEFAULT 0 CHECK (eval_samples >= 0),
  PRIMARY KEY (run_id, round, attempt, client_id),
  FOREIGN KEY (run_id, round, attempt) REFERENCES rounds (run_id, round, attempt)
) STRICT;

CREATE INDEX client_results_by_client ON client_results (client_id);

CREATE TABLE events (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  time_ms     INTEGER NOT NULL,
  kind        TEXT    NOT NULL CHECK (kind <> ''),
  run_id      INTEGER,
  round       INTEGER,
  client_id   TEXT    NOT NULL DEFAULT '',
  detail_json TEXT    NOT NULL DEFAULT '{}'
) STRICT;

PRAGMA user_version = 1;
)sql"},
    // Migration 2: privacy. Whether a round was secure-aggregated (then its client rows
    // hold no update, sample count or metric of a single client), and the privacy budget
    // spent by the run up to and including the round (NULL: the run has no DP).
    {2, R"sql(
ALTER TABLE rounds ADD COLUMN secure_aggregation INTEGER NOT NULL DEFAULT 0
  CHECK (secure_aggregation IN (0, 1));
ALTER TABLE rounds ADD COLUMN epsilon REAL CHECK (epsilon IS NULL OR epsilon >= 0);
PRAGMA user_version = 2;
)sql"},
    // Migration 3: a run's federated feature scale (issue 19): per feature the mean and
    // standard deviation every site of the run standardises with, as JSON arrays of
    // numbers, so a restarted server sends the same scale.
    {3, R"sql(
CREATE TABLE run_feature_scales (
  run_id     INTEGER NOT NULL PRIMARY KEY REFERENCES runs (id),
  features   INTEGER NOT NULL CHECK (features >= 1),
  mean_json  TEXT    NOT NULL,
  std_json   TEXT    NOT NULL,
  sites      INTEGER NOT NULL CHECK (sites >= 1),
  samples    INTEGER NOT NULL CHECK (samples >= 0),
  created_ms INTEGER NOT NULL
) STRICT;
PRAGMA user_version = 3;
)sql"},
    // Migration 4: admin access (issue 19). API tokens made through the admin API, kept
    // as their SHA-256 only (the token itself is shown once and stored nowhere), and the
    // audit trail of admin actions and failed authentications. Names are unique, revoked
    // ones included, so an audit row's token name names one token for ever.
    {4, R"sql(
CREATE TABLE api_tokens (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  name        TEXT    NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 64),
  role        TEXT    NOT NULL CHECK (role IN ('read', 'admin')),
  sha256      TEXT    NOT NULL UNIQUE CHECK (length(sha256) = 64),
  created_ms  INTEGER NOT NULL,
  created_by  TEXT    NOT NULL CHECK (created_by <> ''),
  expires_ms  INTEGER,
  revoked_ms  INTEGER
) STRICT;

CREATE TABLE audit_log (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  time_ms     INTEGER NOT NULL,
  token_name  TEXT    NOT NULL DEFAULT '',
  token_id    INTEGER,
  role        TEXT    NOT NULL DEFAULT '',
  remote      TEXT    NOT NULL DEFAULT '',
  method      TEXT    NOT NULL CHECK (method <> ''),
  path        TEXT    NOT NULL,
  status      INTEGER NOT NULL CHECK (status BETWEEN 100 AND 599),
  detail_json TEXT    NOT NULL DEFAULT '{}'
) STRICT;
PRAGMA user_version = 4;
)sql"},
    // Migration 5: federated evaluation (issue 19). What each client asked to evaluate a
    // committed round's new global model answered: metrics on its own test split, or why
    // there are none (refused by its policy, failed, no answer before the deadline,
    // offline, disconnected). Written with the round; the round row's fed_eval_* columns
    // hold their sample-weighted mean.
    {5, R"sql(
CREATE TABLE round_evaluations (
  run_id    INTEGER NOT NULL REFERENCES runs (id),
  round     INTEGER NOT NULL CHECK (round >= 1),
  client_id TEXT    NOT NULL REFERENCES clients (id),
  status    TEXT    NOT NULL
            CHECK (status IN ('ok', 'refused', 'failed', 'timeout', 'offline', 'dropped')),
  message   TEXT    NOT NULL DEFAULT '',
  loss      REAL,
  accuracy  REAL,
  samples   INTEGER NOT NULL DEFAULT 0 CHECK (samples >= 0),
  PRIMARY KEY (run_id, round, client_id),
  CHECK (status = 'ok' OR (loss IS NULL AND accuracy IS NULL AND samples = 0))
) STRICT;
PRAGMA user_version = 5;
)sql"},
    // Migration 6 (issue 20): where each round attempt spent its time: offsets of the
    // round's milestones and durations of its work, and the server's CPU time over it.
    // Written after the round's row, without an fsync of its own (the next commit's makes
    // it durable): timing is history for reading, not part of the round's atomic commit.
    // And over-selection: a round closes once it has enough updates, and the selected
    // clients still training are "late" (a result status, and a count on the round).
    // SQLite cannot change a CHECK in place, so client_results is rebuilt (the documented
    // procedure: new table, copy, drop, rename; no table references client_results).
    {6, R"sql(
ALTER TABLE rounds ADD COLUMN late INTEGER NOT NULL DEFAULT 0 CHECK (late >= 0);
CREATE TABLE client_results_v6 (
  run_id        INTEGER NOT NULL,
  round         INTEGER NOT NULL,
  attempt       INTEGER NOT NULL,
  client_id     TEXT    NOT NULL REFERENCES clients (id),
  status        TEXT    NOT NULL
                CHECK (status IN ('ok', 'rejected', 'timeout', 'dropped', 'late')),
  reason        TEXT    NOT NULL DEFAULT '',
  samples       INTEGER NOT NULL CHECK (samples >= 0),
  loss          REAL,
  accuracy      REAL,
  duration_s    REAL,
  bytes_up      INTEGER NOT NULL CHECK (bytes_up >= 0),
  bytes_down    INTEGER NOT NULL CHECK (bytes_down >= 0),
  eval_loss     REAL,
  eval_accuracy REAL,
  eval_samples  INTEGER NOT NULL DEFAULT 0 CHECK (eval_samples >= 0),
  PRIMARY KEY (run_id, round, attempt, client_id),
  FOREIGN KEY (run_id, round, attempt) REFERENCES rounds (run_id, round, attempt)
) STRICT;
INSERT INTO client_results_v6 SELECT * FROM client_results;
DROP TABLE client_results;
ALTER TABLE client_results_v6 RENAME TO client_results;
CREATE INDEX client_results_by_client ON client_results (client_id);

CREATE TABLE round_phases (
  run_id                  INTEGER NOT NULL,
  round                   INTEGER NOT NULL,
  attempt                 INTEGER NOT NULL,
  total_ms                REAL    NOT NULL CHECK (total_ms >= 0),
  requests_queued_ms      REAL    NOT NULL CHECK (requests_queued_ms >= 0),
  train_written_ms        REAL             CHECK (train_written_ms >= 0),
  first_update_ms         REAL             CHECK (first_update_ms >= 0),
  last_update_ms          REAL             CHECK (last_update_ms >= 0),
  validate_ms             REAL    NOT NULL CHECK (validate_ms >= 0),
  aggregate_ms            REAL    NOT NULL CHECK (aggregate_ms >= 0),
  evaluate_ms             REAL    NOT NULL CHECK (evaluate_ms >= 0),
  federated_evaluation_ms REAL             CHECK (federated_evaluation_ms >= 0),
  checkpoint_ms           REAL    NOT NULL CHECK (checkpoint_ms >= 0),
  commit_ms               REAL    NOT NULL CHECK (commit_ms >= 0),
  cpu_user_ms             REAL    NOT NULL CHECK (cpu_user_ms >= 0),
  cpu_system_ms           REAL    NOT NULL CHECK (cpu_system_ms >= 0),
  PRIMARY KEY (run_id, round, attempt),
  FOREIGN KEY (run_id, round, attempt) REFERENCES rounds (run_id, round, attempt)
) STRICT;
PRAGMA user_version = 6;
)sql"},
    // What the privacy accountant charged each DP round (z, the sites' (q, steps) shapes,
    // adaptive clipping's C), so a resumed run composes its ε exactly instead of assuming
    // today's sites and noise for every past round. NULL for rounds before this version and
    // for runs without DP. And when each round closed, on the phases' microsecond clock.
    {7, R"sql(
ALTER TABLE rounds ADD COLUMN dp_charge TEXT CHECK (dp_charge IS NULL OR json_valid(dp_charge));
ALTER TABLE round_phases ADD COLUMN closed_ms REAL CHECK (closed_ms IS NULL OR closed_ms >= 0);
PRAGMA user_version = 7;
)sql"},
    // Checkpoint retention: when the server's keep_checkpoints removed a round's checkpoint
    // file (wall clock, ms). The row stays, so the history still says what the file was;
    // NULL while the file is kept.
    {8, R"sql(
ALTER TABLE checkpoints ADD COLUMN removed_ms INTEGER CHECK (removed_ms IS NULL OR removed_ms >= 0);
PRAGMA user_version = 8;
)sql"},
};

static_assert(std::size(kMigrations) == kSchemaVersion, "one migration per schema version");

std::string version_text(std::int64_t version) {
  return std::to_string(version);
}

}  // namespace

std::span<const Migration> migrations() noexcept {
  return kMigrations;
}

result<std::int64_t> schema_version(Database& db) {
  auto statement = db.prepare("PRAGMA user_version");
  if (!statement) {
    return statement.error();
  }
  auto stepped = statement->step();
  if (!stepped) {
    return stepped.error();
  }
  FEDCORE_ASSERT(*stepped == StepResult::row, "PRAGMA user_version returns one row");
  return statement->column_int64(0);
}

result<void> migrate(Database& db) {
  // Most opens find the schema current; answer those without taking the write lock.
  auto version = schema_version(db);
  if (!version) {
    return version.error();
  }
  if (*version == kSchemaVersion) {
    return {};
  }
  auto transaction = Transaction::begin(db, TransactionMode::immediate);
  if (!transaction) {
    return transaction.error();
  }
  // Read again under the lock: another process may have migrated in between.
  version = schema_version(db);
  if (!version) {
    return version.error();
  }
  if (*version > kSchemaVersion) {
    std::string message = "database '" + db.path() + "' has schema version ";
    message += version_text(*version);
    message += ", newer than the newest this build knows (";
    message += version_text(kSchemaVersion);
    message += "); it was written by a newer Fedcore";
    return fail(errc::failed_precondition, std::move(message));
  }
  for (const auto& migration : kMigrations) {
    if (migration.version <= *version) {
      continue;
    }
    if (auto applied = db.exec(migration.sql); !applied) {
      std::string message = "database '" + db.path() + "': migration ";
      message += version_text(migration.version);
      message += " failed: ";
      message += applied.error().message;
      return fail(applied.error().code, std::move(message));
    }
  }
  version = schema_version(db);
  if (!version) {
    return version.error();
  }
  FEDCORE_ASSERT(*version == kSchemaVersion, "the last migration sets user_version");
  return transaction->commit();
}

result<void> require_current_schema(Database& db) {
  auto version = schema_version(db);
  if (!version) {
    return version.error();
  }
  if (*version == kSchemaVersion) {
    return {};
  }
  std::string message = "database '" + db.path() + "' has schema version ";
  message += version_text(*version);
  message += " but this build reads version ";
  message += version_text(kSchemaVersion);
  if (*version == 0) {
    message += "; it is not a Fedcore history (or was never opened by the server)";
  } else if (*version < kSchemaVersion) {
    message += "; open it read-write once to migrate it";
  } else {
    message += "; it was written by a newer Fedcore";
  }
  return fail(errc::failed_precondition, std::move(message));
}

}  // namespace fedcore::store
