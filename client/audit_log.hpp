// AuditLog: the site's own record of what its data was used for, kept at the site.
//
// An append-only JSON-lines file (path in the daemon config, "audit_log"), one line per
// event, written with one write() to a file opened with O_APPEND and fsync'd before the
// call returns, so a line that is recorded survives a crash:
//
//   {"seq":1,"time":"2024-05-02T09:14:03.120Z","time_ms":1714641243120,
//    "event":"request_received","server":"fl.example.org:7443","run":3,"round":1,
//    "model_type":"logreg","model":{...},"parameters":31,"epochs":1,
//    "privacy":{"secure_aggregation":false,"dp":"none","epsilon":0,"delta":0},
//    "prev":"0000...0000"}
//
// Events (the "event" field) and what else each line carries:
//   request_received  server, run, round, model_type, model (the spec), parameters, epochs,
//                     batch_size, privacy terms
//   refused           run, round, reason (RefusalReason name), words
//   not_trained       run, round, code, words (local training failed)
//   trained           run, round, samples, seconds, loss
//   update_sent       run, round, bytes (the parameters that left the site), samples
//   evaluation_sent   run, round, samples, loss, accuracy (of the received global model);
//                     for an EVALUATE also "final" and "for": "evaluate"
//   evaluation_requested  server, run, round, final, model_type, model, parameters, privacy
//                     (an EVALUATE: the server asks the site to evaluate a model, no training)
//   evaluation_refused  run, round, reason (RefusalReason name), words
//   not_evaluated     run, round, code, words (the evaluation failed at the site)
//   feature_stats_sent  server, run, features, samples (per-feature count, sum and sum of
//                     squares of the training split left the site: client/feature_scaling.hpp)
//   server_refused    server, reason, words (the server failed the site's identity check)
//
// Every line ends with "prev": the SHA-256 (hex) of the previous line's bytes (without its
// newline; 64 zeros for the first line), so changing, inserting or deleting a line breaks
// the chain at the next line: verify_audit_log() finds it. Cutting lines off the end is
// not visible from the file alone; verify_audit_log() returns the head (the last line's
// hash), which a site can note elsewhere to detect that too.
//
// Write failures are sticky: after one failed write or fsync the log is broken (its last
// line may be torn) and every later record() fails, so that nothing leaves the site
// unrecorded (the session then refuses to send). A file whose last line is torn is refused
// by open(): move it aside, verify it, and start a new one.
//
// Thread safety: none; the daemon's io thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "client/site_policy.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/util/clock.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

class AuditLog {
 public:
  // Opens `path` for appending, creating it (mode 0640) if needed, and continues the chain
  // from its last line. Takes an exclusive advisory lock (flock) for the object's life, so
  // two daemons never interleave their chains. `clock` gives the lines' wall time and must
  // outlive the log.
  // Errors: io_error — the file cannot be opened, read or locked (the message names it);
  // failed_precondition — another process holds the lock; data_loss — the last line is
  // torn (no newline), longer than the line limit, or is not an audit line.
  static result<std::unique_ptr<AuditLog>> open(const std::string& path, const Clock& clock);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Appends one line: {"seq", "time", "time_ms", "event", ...fields, "prev"}. `fields` is an
  // object whose keys do not clash with those. Errors: io_error when the write or the fsync
  // fails, and from then on (the log is broken).
  result<void> record(std::string_view event, const nlohmann::json& fields);

  // The events of the table above.
  result<void> request_received(std::string_view server, const protocol::TrainRequest& request,
                                std::size_t parameter_count);
  result<void> refused(const protocol::TrainRequest& request, const PolicyRefusal& refusal);
  result<void> not_trained(const protocol::TrainRequest& request, const error& why);
  result<void> trained(const protocol::TrainRequest& request, const protocol::UpdateReport& report);
  result<void> update_sent(const protocol::TrainRequest& request,
                           const protocol::UpdateReport& report, std::uint64_t bytes);
  result<void> evaluation_sent(const protocol::TrainRequest& request,
                               const protocol::LocalEvaluation& evaluation);
  result<void> evaluation_requested(std::string_view server,
                                    const protocol::EvaluateRequest& request,
                                    std::size_t parameter_count);
  result<void> evaluation_refused(const protocol::EvaluateRequest& request,
                                  const PolicyRefusal& refusal);
  result<void> not_evaluated(const protocol::EvaluateRequest& request, const error& why);
  result<void> evaluation_sent(const protocol::EvaluateRequest& request,
                               const protocol::LocalEvaluation& evaluation);
  result<void> feature_stats_sent(std::string_view server,
                                  const protocol::FeatureStatsReport& report);
  result<void> server_refused(std::string_view server, const PolicyRefusal& refusal);

  const std::string& path() const noexcept { return path_; }
  std::uint64_t lines() const noexcept { return seq_; }
  // SHA-256 (hex) of the last line written; 64 zeros for an empty log.
  const std::string& head() const noexcept { return head_; }

 private:
  AuditLog(std::string path, int fd, const Clock& clock, std::uint64_t seq, std::string head);

  std::string path_;
  int fd_;
  const Clock& clock_;
  std::uint64_t seq_;
  std::string head_;
  bool broken_ = false;
};

struct AuditSummary {
  std::uint64_t lines = 0;
  std::string head;  // SHA-256 (hex) of the last line; 64 zeros for an empty log
};

// Checks the chain of an audit log: every line is a JSON object whose "seq" is its line
// number (from 1) and whose "prev" is the SHA-256 of the line before it.
// Errors: not_found / io_error — the file cannot be read; data_loss — naming the first line
// that breaks the chain, is not an audit line, is torn, or is longer than the line limit.
result<AuditSummary> verify_audit_log(const std::string& path);

}  // namespace fedcore::client
