// The rows of the server's history (docs/schema.md), as plain values passed to and
// returned by HistoryStore. Fields named *_json hold JSON text; times are milliseconds
// since the Unix epoch; byte counts are totals for the round or client.
//
// Doubles that are not optional may be NaN (a diverged loss); SQLite has no NaN, so they
// are stored as NULL and read back as NaN. An optional double set to NaN reads back empty.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fedcore::store {

// ---- Enumerations, stored as their lower-case names.

enum class RunState { pending, running, paused, finished, failed, stopped };
enum class RoundState { committed, failed };
// late: selected, but the round closed with enough updates before this client answered
// (over-selection, docs/config.md); its update, if it comes, is refused as stale.
enum class ResultStatus { ok, rejected, timeout, dropped, late };
// What became of one client asked to evaluate a round's new global model.
enum class EvaluationStatus { ok, refused, failed, timeout, offline, dropped };

inline constexpr std::array<std::string_view, 6> kRunStateNames = {
    "pending", "running", "paused", "finished", "failed", "stopped"};
inline constexpr std::array<std::string_view, 2> kRoundStateNames = {"committed", "failed"};
inline constexpr std::array<std::string_view, 5> kResultStatusNames = {"ok", "rejected", "timeout",
                                                                       "dropped", "late"};
inline constexpr std::array<std::string_view, 6> kEvaluationStatusNames = {
    "ok", "refused", "failed", "timeout", "offline", "dropped"};

constexpr std::string_view to_string(RunState s) noexcept {
  return kRunStateNames[static_cast<std::size_t>(s)];
}
constexpr std::string_view to_string(RoundState s) noexcept {
  return kRoundStateNames[static_cast<std::size_t>(s)];
}
constexpr std::string_view to_string(ResultStatus s) noexcept {
  return kResultStatusNames[static_cast<std::size_t>(s)];
}
constexpr std::string_view to_string(EvaluationStatus s) noexcept {
  return kEvaluationStatusNames[static_cast<std::size_t>(s)];
}

// The value whose name is `name`, or nothing.
template <class Enum, std::size_t N>
constexpr std::optional<Enum> enum_from_name(const std::array<std::string_view, N>& names,
                                             std::string_view name) noexcept {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == name) {
      return static_cast<Enum>(i);
    }
  }
  return std::nullopt;
}

// ---- Records.

// A federation client (a hospital's daemon), keyed by its certificate identity.
struct ClientRecord {
  std::string id;
  std::int64_t first_seen_ms = 0;  // set by the first upsert, kept afterwards
  std::int64_t last_seen_ms = 0;
  std::int64_t samples = 0;  // training examples the client reported
  std::string input_shape_json = "[]";
  std::string capabilities_json = "{}";
  bool online = false;
  // Derived on read, ignored on write: committed rounds in which this client's result
  // has status ok (it contributed to the aggregate).
  std::int64_t rounds_joined = 0;

  bool operator==(const ClientRecord&) const = default;
};

// One federated training run: a configuration and its rounds.
struct RunRecord {
  std::int64_t id = 0;  // assigned by create_run
  std::string name;
  std::string config_json = "{}";
  RunState state = RunState::pending;
  std::int64_t rounds_total = 0;
  std::int64_t last_round = 0;  // last committed round, 0 = none; advanced by commit_round
  std::int64_t created_ms = 0;
  std::int64_t updated_ms = 0;
  std::string error;  // why the run failed or stopped; empty otherwise

  bool operator==(const RunRecord&) const = default;
};

// What a DP round attempt was charged (server/federation/privacy_budget.hpp): enough to
// compose the run's ε again, exactly, after a restart, and to continue adaptive clipping.
struct DpCharge {
  struct Shape {
    double q = 1.0;  // sampling ratio of each step
    std::int64_t steps = 1;
    bool operator==(const Shape&) const = default;
  };
  double noise_multiplier = 0;      // z of the round
  std::vector<Shape> shapes;        // every distinct (q, steps) of the round's selected sites
  std::optional<double> clip_norm;  // adaptive clipping's C after the round
  bool operator==(const DpCharge&) const = default;
};

// One attempt at one round of a run. A round number may be attempted several times: any
// number of failed attempts, then at most one committed attempt. Attempts are numbered
// 1, 2, ... per (run, round) by the store.
struct RoundRecord {
  std::int64_t run_id = 0;
  std::int64_t round = 0;                    // 1-based
  std::int64_t attempt = 0;                  // assigned by the store; ignored on write
  RoundState state = RoundState::committed;  // set by the store from the method called
  std::int64_t started_ms = 0;
  std::int64_t finished_ms = 0;
  // Clients asked to train, and what became of them.
  std::int64_t selected = 0;
  std::int64_t accepted = 0;
  std::int64_t rejected = 0;
  std::int64_t timed_out = 0;
  std::int64_t dropped = 0;
  std::int64_t late = 0;    // over-selected clients still training when the round closed
  double train_loss = 0.0;  // sample-weighted over accepted updates
  double train_accuracy = 0.0;
  std::optional<double> eval_loss;  // server-side evaluation of the new global model
  std::optional<double> eval_accuracy;
  std::optional<double> fed_eval_loss;  // federated evaluation on the clients' held-out data
  std::optional<double> fed_eval_accuracy;
  std::int64_t bytes_up = 0;  // client -> server
  std::int64_t bytes_down = 0;
  bool secure_aggregation = false;            // only the sum of the updates was ever unmasked
  std::optional<double> epsilon;              // DP budget spent by the run through this round
  std::optional<DpCharge> dp_charge;          // what the accountant charged (DP runs)
  std::string failure_reason;                 // failed attempts only
  std::optional<std::int64_t> checkpoint_id;  // assigned by commit_round; ignored on write

  bool operator==(const RoundRecord&) const = default;
};

// What one client did in one round attempt.
struct ClientResult {
  std::string client_id;  // must name a known client (upsert_client first)
  ResultStatus status = ResultStatus::ok;
  std::string reason;  // why rejected / timed out / dropped; empty when ok
  std::int64_t samples = 0;
  double loss = 0.0;
  double accuracy = 0.0;
  double duration_s = 0.0;
  std::int64_t bytes_up = 0;
  std::int64_t bytes_down = 0;
  std::optional<double> eval_loss;  // federated evaluation, if this client was asked
  std::optional<double> eval_accuracy;
  std::int64_t eval_samples = 0;

  bool operator==(const ClientResult&) const = default;
};

// One client's federated evaluation of a committed round's new global model
// (round_evaluations, docs/schema.md): its metrics on its own test split, or why there are
// none. Written with the round by commit_round.
struct ClientEvaluation {
  std::int64_t round = 0;  // filled in on read; commit_round writes its own round's number
  std::string client_id;   // must name a known client
  EvaluationStatus status = EvaluationStatus::ok;
  std::string message;         // why not ok (the site's words, or the server's); empty when ok
  std::optional<double> loss;  // ok only
  std::optional<double> accuracy;
  std::int64_t samples = 0;  // test samples behind the metrics; 0 unless ok

  bool operator==(const ClientEvaluation&) const = default;
};

// A checkpoint file of the global model after a committed round. The caller writes the
// file (model::write_file_atomically) before commit_round; the store only references it.
struct CheckpointRef {
  std::string path;
  std::int64_t size_bytes = 0;
  std::uint32_t crc32 = 0;         // of the content, not the whole file (docs/schema.md)
  std::string layout_fingerprint;  // ParamLayout::fingerprint_hex()

  bool operator==(const CheckpointRef&) const = default;
};

// A checkpoint row: the reference and the round it belongs to.
struct CheckpointRecord {
  std::int64_t id = 0;
  std::int64_t run_id = 0;
  std::int64_t round = 0;
  CheckpointRef ref;
  // When checkpoint retention removed the file (wall clock, ms); nullopt while it is kept.
  std::optional<std::int64_t> removed_ms;

  bool operator==(const CheckpointRecord&) const = default;
};

// Checkpoint retention for one commit (HistoryStore::commit_round): keep the files of the
// run's `keep_last` newest rounds, this one included; the rows of older ones are marked
// removed at `now_ms` in the round's transaction, and their paths handed back for the
// caller to delete once the commit is durable. keep_last 0 keeps every file.
struct CheckpointRetention {
  std::int64_t keep_last = 0;
  std::int64_t now_ms = 0;
};

// An entry of the server's event log (run started, client joined, round committed, ...).
struct EventRecord {
  std::int64_t id = 0;  // assigned by append_event, increasing; ignored on write
  std::int64_t time_ms = 0;
  std::string kind;  // non-empty, e.g. "round_committed"
  std::optional<std::int64_t> run_id;
  std::optional<std::int64_t> round;
  std::string client_id;  // empty when the event concerns no client
  std::string detail_json = "{}";

  bool operator==(const EventRecord&) const = default;
};

// Where one round attempt spent its time (round_phases, docs/schema.md), measured by the
// run controller on the steady clock from the round's start. Offsets say when something
// happened; durations add up the work of that kind over the round. A field the round never
// reached (no update arrived, a failed round has no checkpoint) is empty or 0.
struct RoundPhases {
  std::int64_t run_id = 0;
  std::int64_t round = 0;
  std::int64_t attempt = 0;  // of the round row it describes
  // The round's start to its row (and these phases) written; for a round that handed its
  // checkpoint to the worker (overlap_checkpoints), to the hand-off: its checkpoint_ms and
  // commit_ms then ran alongside the next round, and its CPU time stops there too.
  double total_ms = 0;
  // Offsets: every TRAIN queued (sampling, nonces, framing); the last TRAIN frame written
  // to its socket; the first and the last update received.
  double requests_queued_ms = 0;
  std::optional<double> train_written_ms;
  std::optional<double> first_update_ms;
  std::optional<double> last_update_ms;
  // Offset: the round closed (its last awaited update folded in, or its deadline); the
  // round row's finished time is taken here, so this is the row's round time on the
  // microsecond clock (v7; absent in rows written before).
  std::optional<double> closed_ms;
  // Durations: checking updates (validate_update; plain FedAvg measures an update's
  // distance while folding it, in aggregate_ms, and only a refused one gets here), folding
  // them into the aggregate and
  // finishing it, the server's evaluation of the new model, the federated evaluation stage,
  // the checkpoint file, the SQLite transaction that commits the round.
  double validate_ms = 0;
  double aggregate_ms = 0;
  double evaluate_ms = 0;
  std::optional<double> federated_evaluation_ms;
  double checkpoint_ms = 0;
  double commit_ms = 0;
  // The server process's CPU time over the round (getrusage: every thread).
  double cpu_user_ms = 0;
  double cpu_system_ms = 0;

  bool operator==(const RoundPhases&) const = default;
};

// Every recorded round attempt's phases added up, in seconds (GET /metrics). updates_s is
// the time from the requests queued to the last update received.
struct RoundPhaseTotals {
  std::int64_t rounds = 0;
  double total_s = 0;
  double requests_s = 0;
  double updates_s = 0;
  double validate_s = 0;
  double aggregate_s = 0;
  double evaluate_s = 0;
  double federated_evaluation_s = 0;
  double checkpoint_s = 0;
  double commit_s = 0;
  double cpu_user_s = 0;
  double cpu_system_s = 0;

  bool operator==(const RoundPhaseTotals&) const = default;
};

// A run's federated feature scale (docs/protocol.md, "Feature scaling"): one mean and
// population standard deviation per feature, combined once from the selected sites'
// training-split statistics before the run's first round, then sent with every TRAIN of
// the run. No single site's statistics are stored.
struct FeatureScaleRecord {
  std::int64_t run_id = 0;
  std::vector<double> mean;
  std::vector<double> stddev;  // > 0 (1 for a constant feature)
  std::int64_t sites = 0;      // sites whose statistics it combines, >= 1
  std::int64_t samples = 0;    // training samples behind it (the largest per-feature count)
  std::int64_t created_ms = 0;

  bool operator==(const FeatureScaleRecord&) const = default;
};

// An admin API token made through the API (server/api/token_store.hpp). Only the token's
// SHA-256 is stored; `role` is "read" or "admin".
struct ApiTokenRecord {
  std::int64_t id = 0;  // assigned by create_api_token; ignored on write
  std::string name;     // 1 to 64 bytes, unique among every token ever made
  std::string role;
  std::string sha256_hex;  // 64 lower-case hex digits
  std::int64_t created_ms = 0;
  std::string created_by;  // the name of the token that made it, or "config"
  std::optional<std::int64_t> expires_ms;
  std::optional<std::int64_t> revoked_ms;

  bool operator==(const ApiTokenRecord&) const = default;
};

// One admin action or failed authentication (server/api/audit.hpp). Never holds a token.
struct AuditRecord {
  std::int64_t id = 0;  // assigned by append_audit, increasing; ignored on write
  std::int64_t time_ms = 0;
  std::string token_name;                // empty when no token was recognised
  std::optional<std::int64_t> token_id;  // tokens made through the API only
  std::string role;                      // "read", "admin", or empty
  std::string remote;                    // the client's address
  std::string method;                    // non-empty
  std::string path;                      // without the query string
  std::int64_t status = 0;               // the HTTP status answered, 100..599
  std::string detail_json = "{}";

  bool operator==(const AuditRecord&) const = default;
};

}  // namespace fedcore::store
