// HistoryStore: the server's durable history in one SQLite file — clients, runs, round
// attempts, per-client results, checkpoint references and an event log (schema in
// docs/schema.md). Callers deal in the records of store/records.hpp; no SQL crosses this
// interface.
//
// Durability: the file is opened in WAL mode with synchronous=FULL, so a method that
// returned success has reached the disk; a crash (even SIGKILL mid-write) leaves every
// earlier success intact and nothing of the interrupted call. Two kinds of row are the
// exception, so that a round costs one fsync and not one per update: events
// (append_event) and round phases (record_round_phases) are appended to the log without
// an fsync of their own, and the next fsync'ed commit (commit_round, record_failed_round,
// any other write) makes them durable with it. A killed process loses none of them; a
// power loss can lose those written after the last round commit, which are about a round
// that was never reported committed.
//
// The round invariant: for each run, the committed rounds are exactly 1..last_round.
// commit_round writes a round, its client results, its checkpoint reference and the new
// last_round in one transaction, and only for round last_round + 1.
//
// Checkpoint files are the caller's: write one with model::write_file_atomically, then
// pass its reference to commit_round. A file written but never committed (the process
// died in between) is an orphan; the federation server deletes them at start-up
// (server/federation/orphan_checkpoints.hpp) from referenced_checkpoint_paths().
//
// Errors common to every method: errc::unavailable when another connection holds the
// write lock past StoreOptions::busy_timeout; errc::io_error when the disk refuses;
// errc::data_loss when the file turns out to be corrupt; errc::permission_denied for a
// write through a store opened with open_read_only. Unknown ids give errc::not_found
// naming the id. Methods list their other errors below.
//
// Thread safety: none. A HistoryStore is one connection and belongs to one thread at a
// time; give each reader thread its own open_read_only store. Any number of processes
// may read while one writes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "server/store/records.hpp"
#include "server/store/sqlite.hpp"
#include "shared/util/error.hpp"

namespace fedcore::store {

struct StoreOptions {
  // How long a call waits for another connection's write lock before errc::unavailable.
  std::chrono::milliseconds busy_timeout{5000};
};

// Largest `limit` accepted by the paged listings.
inline constexpr std::int64_t kMaxPageSize = 1000;

class HistoryStore {
 public:
  // Opens or creates the history at `path` (":memory:" for a private in-memory store):
  // WAL journal, synchronous=FULL, foreign keys on, PRAGMA quick_check, then migrations
  // up to kSchemaVersion. Errors: errc::not_found (the directory is missing),
  // errc::data_loss (not a database, or quick_check found damage, named in the message),
  // errc::failed_precondition (the schema is newer than this build knows).
  static result<HistoryStore> open(const std::string& path, const StoreOptions& options = {});
  // Opens an existing history for reading only (dashboards, tools); every write method
  // then fails with errc::permission_denied. Like any WAL reader it needs the -wal and
  // -shm files to exist (a writer is running) or to be creatable (a writable directory).
  // Errors: errc::not_found (no such file), errc::failed_precondition (the schema is not
  // exactly kSchemaVersion).
  static result<HistoryStore> open_read_only(const std::string& path,
                                             const StoreOptions& options = {});

  // A second read-write connection to the history `first` has open (checked and migrated
  // by its open()), for another thread of this process: the server commits handed-off
  // rounds through one on its writer thread. WAL mode and synchronous=FULL as open();
  // no quick_check, no migrations. Errors: errc::failed_precondition for an in-memory
  // store (a second connection would see another database) or a schema that is not
  // exactly kSchemaVersion; as open() otherwise.
  static result<HistoryStore> open_second_connection(const HistoryStore& first,
                                                     const StoreOptions& options = {});

  HistoryStore(HistoryStore&&) noexcept = default;
  HistoryStore& operator=(HistoryStore&&) noexcept = default;

  // ---- Clients

  // Inserts the client, or updates every field of an existing one except first_seen_ms
  // (kept) and last_seen_ms (never moves backwards). rounds_joined is ignored. Errors:
  // errc::invalid_argument (empty id, negative samples, a *_json field that is not JSON).
  result<void> upsert_client(const ClientRecord& client);
  // Sets the online flag and advances last_seen_ms to now_ms.
  result<void> set_client_online(const std::string& id, bool online, std::int64_t now_ms);
  result<ClientRecord> get_client(const std::string& id);
  // Every client, ordered by id.
  result<std::vector<ClientRecord>> list_clients();

  // ---- Runs

  // A new run in state pending with last_round 0. Errors: errc::invalid_argument
  // (rounds_total < 1, config_json not JSON).
  result<RunRecord> create_run(const std::string& name, const std::string& config_json,
                               std::int64_t rounds_total, std::int64_t now_ms);
  result<RunRecord> get_run(std::int64_t id);
  // Newest first. Errors: errc::invalid_argument (limit outside [1, kMaxPageSize],
  // negative offset).
  result<std::vector<RunRecord>> list_runs(std::int64_t limit, std::int64_t offset = 0);
  // Moves a run to `state`, recording `error` (empty to clear it) and updated_ms = now_ms.
  // Any state may follow any other except that finished is final. Errors:
  // errc::failed_precondition (the run is finished).
  result<void> set_run_state(std::int64_t id, RunState state, const std::string& error,
                             std::int64_t now_ms);

  // ---- Rounds

  // Commits `round` of run `round.run_id` in one BEGIN IMMEDIATE transaction: the
  // checkpoint row (if any), the round row (state committed, the next attempt number),
  // every client result, and runs.last_round = round.round. Either all of it is written or
  // none. round.attempt, round.state and round.checkpoint_id are ignored; the returned
  // record has them filled in.
  // Errors: errc::not_found (no such run); errc::failed_precondition, with nothing
  // written, when round.round != last_round + 1 (a duplicate, a gap or a step backwards),
  // when round.round > rounds_total, or when the run is not running or paused;
  // errc::already_exists (two results for one client, or a checkpoint path already
  // referenced); errc::failed_precondition (a result names an unknown client);
  // errc::invalid_argument (negative counts).
  // `evaluations` are the round's federated evaluations of its new global model
  // (round_evaluations), written in the same transaction; their round field is ignored.
  // Errors for them: errc::invalid_argument (an empty client id, negative samples, metrics
  // on a status other than ok or none on ok), errc::already_exists (two for one client).
  // `event`, when given, is appended in the same transaction (its id is set on success):
  // the round's own "committed" event is durable exactly when the round is.
  // `retention` (keep_last > 0) marks the checkpoints of the run's rounds up to round.round -
  // keep_last removed in the same transaction, and appends their paths to `removed_paths`
  // (when given) on success: the caller deletes those files once the commit is durable (a
  // crash before that leaves files no kept row names, which the orphan sweep removes).
  result<RoundRecord> commit_round(const RoundRecord& round, std::span<const ClientResult> results,
                                   const std::optional<CheckpointRef>& checkpoint,
                                   std::span<const ClientEvaluation> evaluations = {},
                                   EventRecord* event = nullptr,
                                   const CheckpointRetention& retention = {},
                                   std::vector<std::string>* removed_paths = nullptr);
  // Records a failed attempt at round last_round + 1 with its failure_reason and the
  // client results gathered so far, in one transaction. last_round does not move, so the
  // same round number can be attempted again and finally committed; attempts are numbered
  // 1, 2, ... per round. Errors: as commit_round.
  // `event`, when given, is appended in the same transaction, as for commit_round.
  result<RoundRecord> record_failed_round(const RoundRecord& round,
                                          std::span<const ClientResult> results,
                                          EventRecord* event = nullptr);
  // The round at last_round, or nothing if none is committed yet.
  result<std::optional<RoundRecord>> last_committed_round(std::int64_t run_id);
  // Every attempt of every round of the run, by round then attempt.
  result<std::vector<RoundRecord>> list_rounds(std::int64_t run_id);
  // The client results of one attempt of a round, ordered by client id. Without
  // `attempt`: the committed attempt, or the latest one if none is committed. Errors:
  // errc::not_found (no such run, round or attempt).
  result<std::vector<ClientResult>> list_client_results(
      std::int64_t run_id, std::int64_t round, std::optional<std::int64_t> attempt = std::nullopt);

  // ---- Federated evaluation (round_evaluations)

  // The clients' evaluations of the run's committed rounds, by round then client id; only
  // those of `round` when given. Errors: errc::not_found (no such run).
  result<std::vector<ClientEvaluation>> list_evaluations(
      std::int64_t run_id, std::optional<std::int64_t> round = std::nullopt);
  // The clients that took part in the run: those with a result of status ok in one of its
  // committed rounds, sorted. Errors: errc::not_found (no such run).
  result<std::vector<std::string>> run_participants(std::int64_t run_id);
  // Sets the federated evaluation means of committed round `round` (secure rounds learn
  // them one round later, from the next round's masked sum). Errors: errc::not_found (no
  // such run, or the round is not committed).
  result<void> set_federated_evaluation(std::int64_t run_id, std::int64_t round, double loss,
                                        double accuracy);

  // ---- Round phases (round_phases): where each attempt spent its time

  // Records the phases of attempt phases.attempt of round phases.round, after that
  // attempt's row is written; no fsync of its own (see Durability above). Errors:
  // errc::invalid_argument (a time that is negative or not finite); errc::not_found (no
  // such attempt); errc::already_exists (recorded before).
  result<void> record_round_phases(const RoundPhases& phases);
  // The run's recorded phases, by round then attempt. Errors: errc::not_found (no such run).
  result<std::vector<RoundPhases>> list_round_phases(std::int64_t run_id);
  // Every recorded attempt's phases added up (all runs).
  result<RoundPhaseTotals> round_phase_totals();

  // ---- Checkpoints

  // The checkpoint of the highest committed round that has one, or nothing.
  result<std::optional<CheckpointRecord>> latest_checkpoint(std::int64_t run_id);
  // Every checkpoint of the run, by round, those retention removed included (removed_ms).
  result<std::vector<CheckpointRecord>> list_checkpoints(std::int64_t run_id);
  // Every checkpoint path a row references and retention has not removed, sorted. Files of
  // the checkpoint directory not in this list are orphans and may be deleted.
  result<std::vector<std::string>> referenced_checkpoint_paths();

  // ---- Feature scales

  // Stores run `scale.run_id`'s federated feature scale. A run has at most one: its rounds
  // are trained on it. Errors: errc::not_found (no such run); errc::already_exists (the
  // run has a scale); errc::invalid_argument (no feature, mean and stddev of different
  // lengths, a value that is not finite, a stddev <= 0, sites < 1, negative samples).
  result<void> save_feature_scale(const FeatureScaleRecord& scale);
  // The run's feature scale, or nothing. Errors: errc::not_found (no such run);
  // errc::data_loss (a stored row that does not read back as a scale).
  result<std::optional<FeatureScaleRecord>> feature_scale(std::int64_t run_id);

  // ---- Admin access: API tokens and the audit trail

  // Stores a token made through the admin API and returns it with its id. token.id and
  // token.revoked_ms are ignored. Errors: errc::invalid_argument (a name outside 1..64
  // bytes, a role other than "read"/"admin", a hash that is not 64 lower-case hex digits,
  // an empty created_by); errc::already_exists (the name, or the hash, is taken).
  result<ApiTokenRecord> create_api_token(const ApiTokenRecord& token);
  // Every token made through the API, revoked and expired ones included, by id.
  result<std::vector<ApiTokenRecord>> list_api_tokens();
  // The token whose SHA-256 is `sha256_hex`, or nothing.
  result<std::optional<ApiTokenRecord>> find_api_token(const std::string& sha256_hex);
  // Marks token `id` revoked at now_ms and returns it; revoking a revoked token keeps its
  // first revocation time. Errors: errc::not_found (no such token).
  result<ApiTokenRecord> revoke_api_token(std::int64_t id, std::int64_t now_ms);

  // Appends an audit row and returns its id (ids increase). record.id is ignored. Errors:
  // errc::invalid_argument (empty method, a status outside 100..599, detail_json not JSON).
  result<std::int64_t> append_audit(const AuditRecord& record);
  // Up to `limit` audit rows with id < before_id (every row without it), newest first;
  // pass the last id seen to page on. Errors: errc::invalid_argument (limit outside
  // [1, kMaxPageSize]).
  result<std::vector<AuditRecord>> list_audit(std::optional<std::int64_t> before_id,
                                              std::int64_t limit);
  // Retention: deletes every audit row but the newest `keep_newest` (by id) and returns
  // how many went. Errors: errc::invalid_argument (keep_newest < 1).
  result<std::int64_t> prune_audit(std::int64_t keep_newest);

  // ---- Events

  // Appends an event and returns its id (ids increase and are never reused). event.id is
  // ignored. No fsync of its own (see Durability above). Errors: errc::invalid_argument
  // (empty kind, detail_json not JSON).
  result<std::int64_t> append_event(const EventRecord& event);
  // Appends `events` in order in one transaction (no fsync of its own) and sets each one's
  // id; all or none are written. Errors: as append_event, for the first bad event (and
  // then no id is set).
  result<void> append_events(std::span<EventRecord> events);
  // Up to `limit` events with id > after_id, oldest first; pass the last id seen to page
  // on. Errors: errc::invalid_argument (limit outside [1, kMaxPageSize]).
  result<std::vector<EventRecord>> list_events(std::int64_t after_id, std::int64_t limit);

  // ---- Maintenance

  // PRAGMA integrity_check over the whole file: true if it reports "ok", false if it
  // finds damage (or SQLite reports corruption while checking).
  result<bool> integrity_check();
  // The file this store was opened on, as given to open() (":memory:" for none).
  const std::string& path() const noexcept { return db_.path(); }
  // True for a private in-memory history (":memory:", or no path): one connection only,
  // and nothing on disk.
  bool in_memory() const noexcept { return path().empty() || path() == ":memory:"; }

 private:
  explicit HistoryStore(Database db) noexcept : db_(std::move(db)) {}
  result<RoundRecord> write_round(const RoundRecord& round, std::span<const ClientResult> results,
                                  const std::optional<CheckpointRef>& checkpoint, RoundState state,
                                  std::span<const ClientEvaluation> evaluations, EventRecord* event,
                                  const CheckpointRetention& retention = {},
                                  std::vector<std::string>* removed_paths = nullptr);
  // Runs `write` with synchronous=NORMAL (history_store_phases.cpp).
  result<void> without_fsync(const std::function<result<void>()>& write);
  // The INSERT of append_event, inside the caller's transaction or autocommit.
  result<std::int64_t> insert_event(const EventRecord& event);
  // Inside write_round's transaction (history_store_evaluations.cpp).
  result<void> insert_evaluations(std::int64_t run_id, std::int64_t round,
                                  std::span<const ClientEvaluation> evaluations);

  Database db_;
};

}  // namespace fedcore::store
