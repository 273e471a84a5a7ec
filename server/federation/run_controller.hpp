// RunController: the active run and its rounds, without sockets, timers or threads.
//
// The controller owns what an admin starts and stops (runs: start, resume after a
// restart, stop, manual round requests) and drives each round through the stages of
// federation/round_stage.hpp. It never waits: everything that can change its mind is a
// call — an admin request, a client coming online, an update, a client's error, a lost
// session — and `poll()` then moves the run as far as it can go at the clock's current
// time. `next_wakeup()` says when time alone will change something (a round's deadline,
// the end of the wait for clients); the host (FederationServer) arms a timer for it and
// calls `poll()` when it fires. Tests do the same with a ManualClock and fake sessions,
// so quorum at the deadline, late updates and lost sessions run in microseconds.
//
// A run, between rounds:
//   learning_schema      the model spec lacks its input shape or classes: wait for one
//                        eligible client's HELLO (up to RunConfig::wait_for_clients_s)
//   waiting_for_admin    manual runs, until advance_round()
//   waiting_for_clients  until min_clients eligible clients are online (same bound)
//   collecting_feature_stats
//                        before the first round of a run whose feature scale is federated
//                        (feature_scaling.hpp): the clients selected for it report their
//                        feature statistics until all answered or round_timeout_s; the
//                        combined scale is stored with the run and sent with every TRAIN
//   in_round             a round is between selecting and done/failed
// A committed round goes back to waiting (or finishes the run after the last round); a
// failed round is recorded and retried or pauses the run (RunConfig::on_failed_round).
// Not enough clients when a wait ends pauses the run with the reason.
//
// Durability (docs/engineering.md R2): a round's checkpoint file is complete and synced before
// the one SQLite transaction that commits the round row, its client results and the
// checkpoint reference; nothing of an abandoned round (stop, shutdown) is stored, and a
// restarted server resumes every running run from its last committed round.
//
// Overlap (RunEnvironment::background): with a background worker, a round that is not the
// run's last (and not of a manual run) hands its checkpoint write to the worker and the
// next round starts at once, sending the new global model while the file goes to disk.
// The handed-off round commits in its one transaction when the write has finished: on
// the worker itself, right after the write, when the environment gives it a second
// connection (background_store; the server's file-backed history), else on the
// controller's thread when it next polls. Either way the controller learns of it on its
// own thread and only then reports it (last_round, the "round_committed" announcement,
// hooks); events written meanwhile are announced in id order after it. Up to
// kMaxHandedOff rounds may be handed off at once, so that one round's checkpoint file is
// written while the round before it commits (BackgroundWork's two-part start). Until the
// commit the round is not committed, and the rules hold as before:
//   - rounds commit in order: anything that records a round (its commit, its failure)
//     first settles the rounds handed off before it, waiting for them when more than
//     kMaxHandedOff - 1 would be left (or any, for an inline commit), and anything that
//     ends the run (stop, pause, shutdown, a failure) waits for all of them;
//   - announcements wait while any round is handed off, so a round that has had rounds
//     handed off for kMaxHoldingAnnouncements waits for them all before it hands off:
//     a writer slower than the rounds would otherwise hold them for ever;
//   - a round whose write or commit fails is not recorded, the rounds built on its model
//     (handed off after it, or in flight) are abandoned with it, and the run is held for
//     its storage as usual;
//   - a server killed meanwhile resumes from the last committed round: the rounds after
//     it are redone, as an abandoned round is.
// Without a worker (tests, unless they pass one) every round commits before the next starts.
//
// Storage faults (storage_fault.hpp): when the disk refuses the checkpoint or the commit
// (full, read-only, I/O error), nothing of the round is recorded, the run is paused with a
// reason such as "disk full: ..." and held: the controller probes the storage with a
// doubling interval (an input of next_wakeup()) and resumes the run from its last
// committed round once the storage takes writes again.
//
// Failures are never silent: every way a run ends is recorded in the store (state and
// reason), logged, sent as a `run_ended` event and passed to ServerHooks::run_ended. An
// unexpected exception while driving a run ends it as failed with the exception's text
// (`fail_active_run`, called by the host).
//
// Thread safety: none. The host calls everything from one thread (its io_context).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "server/federation/privacy_budget.hpp"
#include "server/federation/round_stage.hpp"
#include "server/federation/run_config.hpp"
#include "server/federation/server_hooks.hpp"
#include "server/federation/storage_fault.hpp"
#include "server/store/history_store.hpp"
#include "shared/protocol/frame.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/secagg/server.hpp"
#include "shared/util/clock.hpp"
#include "shared/util/cpu_time.hpp"
#include "shared/util/error.hpp"
#include "shared/util/worker_pool.hpp"

namespace fedcore::federation {

class RoundTimer;

// An EVALUATION's metadata: a few numbers and at most kMaxEvaluationMessage bytes of words,
// which JSON escaping can make six times longer.
inline constexpr std::uint32_t kMaxEvaluationMetadata = 8 * 1024;

// A connected client as the controller sees it: its id and the data schema of its HELLO.
struct Candidate {
  std::string client_id;
  std::vector<std::int64_t> input_shape;
  std::int32_t num_classes = 0;
  std::uint64_t samples = 0;  // training samples declared at HELLO
  // Its HELLO announced protocol::kFeatureStatsCapability: it reports feature statistics
  // and applies TRAIN's "scaling".
  bool reports_feature_stats = false;
  // Its HELLO announced protocol::kEvaluateCapability: it answers EVALUATE.
  bool evaluates = false;
  // The protocol version its session speaks (protocol::negotiated_protocol).
  std::uint32_t protocol_version = protocol::kProtocolVersion;
};

// What the controller needs of the connected clients (SessionRegistry in the server,
// a fake in tests).
class SessionDirectory {
 public:
  virtual ~SessionDirectory() = default;
  // Every client with a live session, in any order.
  virtual std::vector<Candidate> online() const = 0;
  // Queues a TRAIN frame for the client's session; a client that has gone is skipped
  // (its loss reaches the controller through on_session_lost). `written` runs on the
  // server's thread once the frame is written to the socket (never if it is not).
  virtual void send_train(const std::string& client_id, std::string metadata,
                          std::shared_ptr<const std::vector<float>> global,
                          std::function<void()> written) = 0;
  // Queues any other frame (secure aggregation's stages), with the same skipping.
  virtual void send(const std::string& client_id, protocol::MessageType type, std::string metadata,
                    std::shared_ptr<const std::vector<float>> payload = nullptr) = 0;
  // The round stopped taking updates: memory kept for receiving them may go (the server's
  // payload gate keeps warm upload buffers only while a round collects).
  virtual void uploads_done() {}
};

// Unpredictable values: the per-client nonce that binds an update to its round.
class Entropy {
 public:
  virtual ~Entropy() = default;
  // 32 hex characters from a CSPRNG in production.
  virtual std::string nonce() = 0;
};

// Receives every event the controller records (the store row is written by the sink).
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void record(std::string_view kind, std::optional<std::int64_t> run,
                      std::optional<std::int64_t> round, std::string_view client_id,
                      std::string detail_json) = 0;
  // An event the store already wrote (inside a round's transaction, with its id): only
  // tell the subscribers. A sink that does not keep the two apart records it.
  virtual void announce(const store::EventRecord& stored) {
    record(stored.kind, stored.run_id, stored.round, stored.client_id, stored.detail_json);
  }
  // From a round's hand-off to its commit on another connection, until the matching
  // release: the server's sink keeps the events recorded meanwhile, writes them when the
  // last hold is released and announces everything in id order (held_announcements.hpp
  // says why). A sink without subscribers that resume by id may ignore both.
  virtual void hold_announcements() {}
  virtual void release_announcements() {}
};

// Where the controller's slow writes run when they may overlap the next round (the
// server's WorkerThread; tests pass a fake they step by hand).
class BackgroundWork {
 public:
  virtual ~BackgroundWork() = default;
  // Runs `job` away from the controller's thread, after every job started before it.
  // Once it has returned, the host calls poll() on the controller's thread.
  virtual void start(std::function<void()> job) = 0;
  // Runs `write` as start() runs a job, then `then` after every `then` started before it,
  // where the next job's `write` may already run (the server: a round's checkpoint file
  // while the round before it commits, on two threads). The host calls poll() once `then`
  // has returned. By default both run as one job.
  virtual void start(std::function<void()> write, std::function<void()> then) {
    start([write = std::move(write), then = std::move(then)] {
      write();
      then();
    });
  }
  // Blocks until every job started so far has returned.
  virtual void finish() = 0;
  // Blocks until `done()` holds, at the latest once every job started so far has returned
  // (the controller waits so for its oldest handed-off round alone, while the next one's
  // file may still be written). `done` may be called on any thread. By default finish().
  virtual void finish_until(const std::function<bool()>& done) {
    (void)done;
    finish();
  }
};

struct RunEnvironment {
  store::HistoryStore& store;
  SessionDirectory& sessions;
  const Clock& clock;
  Entropy& entropy;
  EventSink& events;
  ServerHooks hooks;
  std::string checkpoint_dir;
  Disks* disks = nullptr;  // checkpoint files and storage probes; null: the real disks
  StorageRetry storage_retry{};
  CpuTimeSource cpu_times{};  // the CPU time read per round; null: this process's
  // Checkpoint writes overlap the next round there (class comment); null: never. Its jobs
  // read `clock` and `disks` from its thread.
  BackgroundWork* background = nullptr;
  // A second connection to `store`'s history (HistoryStore::open_second_connection), used
  // only by `background`'s jobs: a handed-off round commits there right after its
  // checkpoint, off the controller's thread. Null: it commits on the controller's thread
  // when the write is done (and always without `background`, or with an in-memory store).
  store::HistoryStore* background_store = nullptr;
  // Threads the strategy may fold on (Strategy::use_workers); null: the controller's only.
  WorkerPool* workers = nullptr;
  // Checkpoint retention: the files of each run's newest keep_checkpoints committed rounds
  // stay, older ones are deleted as rounds commit (their rows say when); 0 keeps them all.
  std::int64_t keep_checkpoints = 0;
};

enum class RunPhase {
  idle,
  learning_schema,
  waiting_for_admin,
  waiting_for_clients,
  collecting_feature_stats,
  in_round,
};
std::string_view run_phase_name(RunPhase phase) noexcept;

class RunController {
 public:
  explicit RunController(RunEnvironment environment);
  ~RunController();
  RunController(const RunController&) = delete;
  RunController& operator=(const RunController&) = delete;

  // Records the run (state running) and makes it active. Errors: failed_precondition
  // while another run is active or on storage hold, or after shutdown(); the store's errors.
  [[nodiscard]] result<std::int64_t> start_run(const RunConfig& config);
  // Makes the store's running run active again (after a crash or a restart): at most
  // one; others are marked paused with a reason, unreadable configs failed.
  [[nodiscard]] result<void> resume_runs();
  // Stops a run: the active one abandons its round in flight (nothing of it is stored);
  // a pending or paused run is marked stopped. Errors: not_found; failed_precondition
  // when it has already ended.
  [[nodiscard]] result<void> stop_run(std::int64_t run_id);
  // Pauses the active run: its round in flight is abandoned (nothing of it is stored)
  // and the run is recorded as paused with the reason "paused by an admin". Errors:
  // not_found; failed_precondition when it is not the active run.
  [[nodiscard]] result<void> pause_run(std::int64_t run_id);
  // Makes a paused run active again; it continues after its last committed round. A run
  // on storage hold is probed first. Errors: not_found; failed_precondition when it is not
  // paused or another run is active or on hold; unavailable (naming what the storage
  // said) while the storage of a held run still refuses writes.
  [[nodiscard]] result<void> resume_run(std::int64_t run_id);
  // Manual runs wait before every round until this is called. Returns the number of the
  // round that will start. Errors: not_found; failed_precondition when the run is not
  // the active run, is not manual, or a round is in flight or already requested.
  [[nodiscard]] result<std::int64_t> advance_round(std::int64_t run_id);
  // Abandons the round in flight (redone after a restart) and refuses new runs. The
  // active run stays `running` in the store so that a restart resumes it.
  void shutdown();
  // Ends the active run as failed with `why` (the host's last resort for an exception).
  void fail_active_run(const std::string& why);

  // Inputs from the sessions. Each may move the run; call poll() after them.
  // `control`: the change of the site's control variate a SCAFFOLD update carries after its
  // parameters (empty otherwise); `step`: a compressed update, decoded as it is folded
  // (then `params` is empty; Round::on_update).
  void on_update(const std::string& client_id, const protocol::UpdateReport& report,
                 std::span<const float> params, std::uint64_t bytes,
                 std::span<const float> control = {}, const protocol::StepDecoder* step = nullptr);
  void on_client_error(const std::string& client_id, const std::string& message);
  void on_session_lost(const std::string& client_id, const std::string& reason);
  // A secure-aggregation message (secagg_keys, _shares, _masked, _revealed). A message
  // that is malformed, out of stage or not for this round is refused with a logged reason
  // (and an event); it changes nothing.
  void on_secure_message(const std::string& client_id, const protocol::Frame& frame);
  // A feature_stats report. One that is malformed, not asked for, for another request or
  // of another feature count is refused with a logged reason (and a feature_stats_refused
  // event); the client then counts as not having reported.
  void on_feature_stats(const std::string& client_id, const protocol::Frame& frame);
  // An EVALUATION answer (run_controller_evaluation.cpp). One that is malformed, not asked
  // for or for another evaluation is refused with a logged reason (and an
  // evaluation_refused event); it changes nothing.
  void on_evaluation(const std::string& client_id, const protocol::Frame& frame);

  // Moves the active run as far as it can go now (see the class comment).
  void poll();
  // When poll() must next be called if nothing else happens; nullopt: only an input can
  // move the run.
  std::optional<Clock::steady_time> next_wakeup() const;

  bool run_active() const noexcept;
  std::int64_t active_run_id() const noexcept;  // 0 when none
  RunPhase phase() const noexcept;
  // The round in flight (0 when none) and its stage.
  std::int64_t active_round() const noexcept;
  std::optional<RoundStage> round_stage() const noexcept;
  // The global model the round in flight sent (null when no round is collecting): what a
  // compressed update's step is added to (shared/protocol/update_encoding.hpp).
  std::shared_ptr<const std::vector<float>> round_global() const;
  // The run paused for its storage and waiting for a probe to pass, if any.
  const std::optional<StorageHold>& storage_hold() const noexcept { return hold_; }
  // Selected in the round in flight and not yet answered.
  bool is_training(const std::string& client_id) const;
  // What a client's frame of `type` may carry now (its session's admission policy): an
  // update at most the active run's model, a masked input that plus the weight and metric
  // words, anything else no payload; an evaluation answer at most
  // kMaxEvaluationMetadata of metadata; and whether the client is selected in the round in
  // flight (only then may it hold one of the server's upload slots).
  struct UploadAllowance {
    std::uint64_t max_payload_bytes = 0;
    std::uint32_t max_metadata_bytes = protocol::FrameLimits{}.max_metadata_bytes;
    bool in_round = false;
  };
  UploadAllowance upload_allowance(const std::string& client_id, protocol::MessageType type) const;

 private:
  struct ActiveRun;
  void activate(const store::RunRecord& record, RunConfig config);
  bool step();
  bool step_round();
  bool prepare();
  void begin_waiting_for_clients();
  // The round's sample (run_config.hpp, "Client sampling"), in client-id order; with weighted
  // sampling `draws` (optional) gets how many times each selected client was drawn.
  std::vector<Candidate> select_clients(
      std::int64_t round, std::map<std::string, std::uint64_t>* draws = nullptr) const;
  void settle_feature_scaling();
  void begin_feature_stats();
  void finish_feature_stats();
  void use_feature_scaling(protocol::FeatureScaling scaling, const std::string& detail_json);
  bool feature_stats_not_given(const std::string& client_id, const std::string& why);
  void begin_round();
  void close_round();
  bool step_secure_stage();
  void fail_secure_round(const std::string& why);
  void record_failed_round();
  bool spend_privacy_budget(const std::vector<Candidate>& selected);
  result<PrivacyBudget> resume_privacy_budget(const DpConfig& dp,
                                              std::span<const DpRoundShape> shapes,
                                              const std::vector<store::RoundRecord>& past,
                                              std::optional<double>& clip);
  std::optional<double> adaptive_clip_norm() const;
  result<void> privatize_secure_mean(secagg::SecAggResult& result, std::size_t selected);
  void commit_round();
  // A round handed off to the background worker (class comment, "Overlap").
  struct PendingCommit;
  static constexpr std::size_t kMaxHandedOff = 2;
  static constexpr std::chrono::milliseconds kMaxHoldingAnnouncements{200};
  // Commits the handed-off rounds, oldest first, whose writes have finished, and waits for
  // the writes while more than `at_most_left` would stay handed off. False when the run
  // did not survive it (a write or a commit failed, or a hook ended the run).
  bool settle_pending_commits(std::size_t at_most_left);
  // The end of every commit, inline or handed off: the transaction, then what follows it.
  // False when the round was not committed (the run is then paused or held).
  bool finish_commit(PendingCommit& round);
  // Deletes the strategy state file of the round before `committed` (run_controller_commit.cpp).
  void forget_previous_state(std::int64_t committed);
  std::int64_t next_round_number() const;
  // Federated evaluation (run_controller_evaluation.cpp).
  bool evaluation_due() const;
  void begin_evaluation();
  bool step_evaluation();
  std::vector<store::ClientEvaluation> take_evaluations(store::RoundRecord& record);
  void record_secure_evaluation(std::int64_t round,
                                const std::optional<std::pair<double, double>>& evaluation);
  void finish_round_attempt(bool committed);
  void end_run(store::RunState state, const std::string& why);
  // Storage faults (run_controller_storage.cpp).
  // `round`: the round whose write failed (0: the next round's number).
  void pause_for_failed_write(const error& failure, FailedWrite what, std::int64_t round);
  void hold_for_storage(const error& failure, FailedWrite what, std::int64_t round = 0);
  result<void> probe_storage(std::uint64_t bytes);
  void retry_held_run();
  result<void> resume_held_run(std::string_view by);
  void hold_paused_for_storage(const std::vector<store::RunRecord>& runs);
  Disks& disks() noexcept { return env_.disks != nullptr ? *env_.disks : real_disks_; }
  void event(std::string_view kind, std::optional<std::int64_t> run,
             std::optional<std::int64_t> round, std::string_view client_id,
             std::string detail_json = "{}");
  // An event for the store to write inside a round's own transaction, then announce.
  store::EventRecord round_event(std::string_view kind, std::string detail_json) const;
  // The last TRAIN frame of attempt `attempt` of round `round` of run `run_id` left.
  void on_train_written(std::int64_t run_id, std::int64_t round, std::int32_t attempt);
  // Writes the phases of the round attempt just recorded (a failure is logged, no more:
  // timing is history, not part of the round).
  void record_phases(const RoundTimer& timer, std::int64_t round, std::int64_t attempt);
  std::vector<Candidate> eligible(bool check_schema) const;

  RunEnvironment env_;
  std::unique_ptr<ActiveRun> active_;
  std::uint64_t generation_ = 0;  // counts activations: tells a hook's new run from the old
  bool stopping_ = false;
  bool polling_ = false;
  std::optional<StorageHold> hold_;
  RealDisks real_disks_;
  // Over-selection: sites a round closed without (late), still training for it; they are
  // not selected again until their update comes or their session ends.
  std::set<std::string> still_training_;
  // Callbacks that outlive the controller (a TRAIN written after shutdown) hold a weak
  // reference to this and do nothing once it is gone.
  std::shared_ptr<const char> alive_ = std::make_shared<const char>();
};

}  // namespace fedcore::federation
