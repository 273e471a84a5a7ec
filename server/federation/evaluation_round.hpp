// EvaluationRound: the bookkeeping of one round's federated evaluation, without I/O or
// clocks (docs/protocol.md, "Federated evaluation").
//
// After a round's aggregation the run controller asks some clients to evaluate the new
// global model (EVALUATE, one fresh nonce each) and records the ones it could not ask
// (offline). EvaluationRound then takes every EVALUATION answer and every lost session
// until all asked clients have answered or the deadline passed, and at close gives one
// row per client for the store and the sample-weighted mean of the metrics of those that
// evaluated:
//
//   an ok answer            -> ok, with loss, accuracy and test samples
//   a refused / failed one  -> refused / failed, with the site's words
//   the session ended       -> dropped, with the reason
//   no answer by close()    -> timeout
//   not connected when asked-> offline
//
// An answer that names another run or round, a nonce not issued to this client, a client
// that was not asked, or a second answer is stale: refused without using up the client's
// answer. A site's test-sample count is its word; the mean weighs each site by
// min(samples, max_samples_per_client) when a cap is set, as FedAvg weighs its update.
//
// Thread safety: none; it belongs to the run's round.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "server/store/records.hpp"
#include "shared/protocol/messages.hpp"

namespace fedcore::federation {

// The sample-weighted mean of the ok evaluations: the round's federated evaluation.
struct EvaluationMean {
  double loss = 0;
  double accuracy = 0;
  std::uint64_t samples = 0;  // the (capped) weights' sum
  std::size_t clients = 0;
};

class EvaluationRound {
 public:
  // `asked`: client id -> the nonce of the EVALUATE sent to it. `offline`: the clients that
  // should have evaluated but had no session. `max_samples_per_client`: 0 = no cap.
  EvaluationRound(std::int64_t run_id, std::int64_t round, std::map<std::string, std::string> asked,
                  const std::vector<std::string>& offline,
                  std::uint64_t max_samples_per_client = 0);

  // Records an answer. Returns false for a stale one, with the reason in `why`.
  bool on_report(const std::string& client_id, const protocol::EvaluationReport& report,
                 std::string* why);
  // An asked client's session ended before it answered (a later session cannot answer:
  // its nonce was for this one): dropped. With status failed: its answer was unreadable.
  void on_dropped(const std::string& client_id, const std::string& reason,
                  store::EvaluationStatus status = store::EvaluationStatus::dropped);

  // A client that should have evaluated but cannot be asked (its HELLO did not announce
  // the capability): recorded as failed with `why`.
  void not_asked(const std::string& client_id, const std::string& why);

  bool is_asked(const std::string& client_id) const;
  bool has_answered(const std::string& client_id) const;
  bool all_answered() const noexcept { return answered_ == asked_.size(); }
  std::size_t asked() const noexcept { return asked_.size(); }

  // Clients that never answered become timeout. The rows are sorted by client id; the
  // mean is empty when no client evaluated. Call once.
  std::vector<store::ClientEvaluation> close();
  std::optional<EvaluationMean> mean() const;

  std::int64_t round() const noexcept { return round_; }

 private:
  std::int64_t run_id_;
  std::int64_t round_;
  std::map<std::string, std::string> asked_;  // id -> nonce
  std::map<std::string, store::ClientEvaluation> rows_;
  std::size_t answered_ = 0;
  std::uint64_t max_samples_per_client_;
};

}  // namespace fedcore::federation
