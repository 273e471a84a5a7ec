// ClientSession: the protocol a site speaks with the server over one connected Link.
//
//   -> HELLO {samples, test_samples, input_shape, num_classes, capabilities, software}
//   <- WELCOME {client_id, heartbeat_seconds}        (or ERROR: refused, the session ends)
//   then, until GOODBYE, a broken link or stop():
//   <- FEATURE_STATS_REQUEST -> FEATURE_STATS (the training split's per-feature moments,
//                               client/feature_scaling.hpp), or ERROR when the site does
//                               not report them or they do not fit the request
//   <- TRAIN (global model)  -> UPDATE (trained parameters + report), or ERROR when the
//                               request cannot be honoured or the site policy refuses it
//                               (the server records "dropped" with the ERROR's words)
//   <- EVALUATE (a model)    -> EVALUATION: loss, accuracy and samples on the local test
//                               split (nothing is trained), or status refused (the site
//                               policy) or failed (with the words why); a malformed
//                               EVALUATE is logged and ignored, as a TRAIN is
//   <- HEARTBEAT / ERROR     (logged; the session goes on)
//   -> HEARTBEAT every heartbeat_seconds, from a coroutine of its own, also while
//      training runs off the io thread
//
// A malformed TRAIN is logged and ignored: the server's round deadline decides. The
// session never reconnects; the daemon around it does (client/daemon.hpp).
//
// Thread safety: run() and stop() on the io_context's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "client/audit_log.hpp"
#include "client/control_variates.hpp"
#include "client/dp_ledger.hpp"
#include "client/error_feedback.hpp"
#include "client/local_trainer.hpp"
#include "client/secure_participation.hpp"
#include "client/site_policy.hpp"
#include "shared/net/link.hpp"
#include "shared/net/sleeper.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

// Simulation seam (fedcore-sim): what to do with an update once local training is done.
enum class UpdateAction {
  send,  // send it (the normal case)
  drop,  // close the connection instead, as a site that goes away mid-round would
};

// What the before_update seam is told about the round just trained.
struct TrainedRound {
  std::int64_t run_id = 0;
  std::int64_t round = 0;
  double train_seconds = 0;
  // The trained parameters about to be sent, which the seam may rewrite (fedcore-sim's
  // colluding attackers, sim/collusion.hpp); valid until its awaitable completes.
  std::vector<float>* update = nullptr;
};

struct SessionHooks {
  // Trains for one request off the io thread and resumes on it: the request, the global
  // model, and SCAFFOLD's gradient correction (c - c_i; empty for other strategies).
  // Required.
  std::function<boost::asio::awaitable<LocalResult>(const protocol::TrainRequest&,
                                                    std::span<const float>, std::span<const float>)>
      train;
  // Awaited after training succeeded and before the UPDATE goes out; may be empty.
  std::function<boost::asio::awaitable<UpdateAction>(const TrainedRound&)> before_update;
  // The site policy (client/site_policy.hpp), asked before training with the request and
  // its parameter count (the payload's floats). A refusal is answered with an ERROR
  // permission_denied "site policy: ..." and nothing is trained. May be empty.
  std::function<std::optional<PolicyRefusal>(const protocol::TrainRequest&, std::size_t)> admit;
  // The site's audit log (client/audit_log.hpp); may be null. When a line cannot be
  // written the round is answered with an ERROR and no update leaves the site.
  AuditLog* audit = nullptr;
  // Key binding for secure aggregation (client/secure_participation.hpp); empty: keys are
  // neither signed nor checked (in-process simulations without a PKI).
  SecureIdentity secure;
  // The site's own record-level DP accountant (client/dp_ledger.hpp); may be null.
  RecordDpLedger* dp_ledger = nullptr;
  // Top-k compression's residual (client/error_feedback.hpp); may be null (no feedback).
  ErrorFeedback* error_feedback = nullptr;
  // SCAFFOLD's control variate of this site (client/control_variates.hpp); may be null: the
  // site then trains every round as if its c_i were zero.
  ControlVariates* control_variates = nullptr;
  // The site's answer to a feature-statistics request (feature_stats_report over its
  // training split, client/feature_scaling.hpp). When set, the HELLO announces the
  // capability protocol::kFeatureStatsCapability; when empty (a site that does not share
  // them), a request is answered with ERROR failed_precondition. What leaves is recorded
  // in the audit log first, as for an update.
  std::function<result<protocol::FeatureStatsReport>(const protocol::FeatureStatsRequest&)>
      feature_stats;
  // Evaluates one EVALUATE's parameters on the local test split off the io thread
  // (client/local_evaluator.hpp). Empty: every EVALUATE is answered failed.
  std::function<boost::asio::awaitable<result<protocol::LocalEvaluation>>(
      const protocol::EvaluateRequest&, std::span<const float>)>
      evaluate;
  // The site policy for EVALUATE (SitePolicyGate::admit_evaluation); a refusal is answered
  // with status refused, "site policy: ...". May be empty.
  std::function<std::optional<PolicyRefusal>(const protocol::EvaluateRequest&, std::size_t)>
      admit_evaluation;
  // Whether each frame is received into the payload of the frame before (so a TRAIN of a
  // large model does not map and zero fresh pages every round), at the price of holding
  // that payload while the session waits. A daemon keeps it; fedcore-sim, with thousands of
  // sites in one process, does not (ClientOptions::keep_receive_buffer).
  bool keep_receive_buffer = true;
};

class ClientSession {
 public:
  // `server` names the peer in logs. `sleeper` paces the heartbeats and must outlive the
  // session's heartbeat coroutine (the daemon owns both).
  ClientSession(boost::asio::io_context& io, std::shared_ptr<net::Link> link, net::Sleeper& sleeper,
                SessionHooks hooks, std::string server);
  ~ClientSession();
  ClientSession(const ClientSession&) = delete;
  ClientSession& operator=(const ClientSession&) = delete;

  // Runs the session to its end. Ok: the server said GOODBYE or stop() was called.
  // Errors: permission_denied (refused at HELLO, with the server's words),
  // invalid_argument (no WELCOME), aborted (before_update dropped the update), and those
  // of the link (unavailable, deadline_exceeded, ...).
  boost::asio::awaitable<result<void>> run(const protocol::Hello& hello);
  // Ends the session: after WELCOME it sends GOODBYE and closes the link once that is
  // written (or after 2 s if it cannot be), before WELCOME it closes at once; run()
  // returns. Idempotent.
  void stop();

  std::uint64_t rounds_trained() const noexcept { return rounds_trained_; }
  std::uint64_t evaluations_sent() const noexcept { return evaluations_sent_; }
  const std::string& identity() const noexcept { return identity_; }  // from WELCOME
  // The protocol version the session speaks (WELCOME's; 0 before it).
  std::uint32_t protocol_version() const noexcept { return protocol_version_; }

 private:
  boost::asio::awaitable<result<void>> on_train(const protocol::Frame& frame);
  std::vector<float> compress(const protocol::TrainRequest& request, std::span<const float> global,
                              std::span<const float> trained);
  // Appends SCAFFOLD's dc to `local.params` (client/control_variates.hpp), from the
  // request's SGD learning rate and the steps taken: the UPDATE payload, parameters then dc.
  // Errors: invalid_argument for another optimizer, failed_precondition when no step was
  // taken (local.params unchanged).
  static result<void> append_scaffold_change(const protocol::TrainRequest& request,
                                             std::span<const float> global, LocalResult& local,
                                             std::span<const float> server_control);
  void on_feature_stats_request(const protocol::Frame& frame);
  boost::asio::awaitable<void> on_evaluate(const protocol::Frame& frame);
  void on_secure_message(const protocol::Frame& frame);
  void send(const OutgoingFrame& frame);

  boost::asio::io_context& io_;
  std::shared_ptr<net::Link> link_;
  net::Sleeper& sleeper_;
  SessionHooks hooks_;
  std::string server_;
  std::string identity_;
  std::uint32_t protocol_version_ = 0;
  std::shared_ptr<bool> ended_ = std::make_shared<bool>(false);  // shared with heartbeats
  std::uint64_t rounds_trained_ = 0;
  std::uint64_t evaluations_sent_ = 0;
  std::optional<SecureParticipation> secure_;  // the secure round in progress, if any
};

}  // namespace fedcore::client
