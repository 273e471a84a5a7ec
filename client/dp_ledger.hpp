// RecordDpLedger: the site's own accountant for record-level DP (DP-SGD at the site).
//
// The server accounts a run's budget too (server/federation/privacy_budget.hpp), but a
// hospital should not have to trust it: a server that understated the noise or ran more
// rounds than the budget allows would spend the site's patients' privacy. So the site
// keeps, per run, what its own DP-SGD actually did (Poisson sampling ratio, noise
// multiplier, steps: LocalResult::record_dp), composes it with the RDP accountant of
// shared/privacy, and before every record-level round computes what the round would
// bring its ε to with the request's terms; a round that would pass the run's stated
// budget (epsilon, delta) is refused with a reason the server records.
//
// With a file (persist_to; the client config's "site_state" folder) every record is
// written there, atomically and synced, before the round's update may leave the site, so a
// restarted daemon continues each run's ledger where it stopped. Without one the ledger
// lives in memory and a restarted daemon starts a run from zero. Runs are keyed by the
// server's run id: a site serving two federations whose run ids meet composes both into one
// ledger, which can only refuse earlier (conservative), never later.
//
// Thread safety: none; the session's thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "client/local_trainer.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

class RecordDpLedger {
 public:
  // `local_records`: the training records DP-SGD samples from (N).
  explicit RecordDpLedger(std::uint64_t local_records) : records_(local_records) {}

  // The ε this site would have spent in the request's run after training it as asked.
  // Errors: invalid_argument (terms the accountant cannot take, e.g. delta 0).
  result<double> epsilon_after(const protocol::TrainRequest& request) const;
  // Why the site must refuse the request (it would pass the run's stated budget), or
  // nothing. Requests without record-level DP pass.
  std::optional<std::string> check(const protocol::TrainRequest& request) const;
  // What DP-SGD did for `run`; returns the ε now spent there at `delta`. Errors: the
  // file's (io_error) when it cannot be written — the steps are counted in memory all the
  // same, and the caller must not let the round's update leave.
  result<double> record(std::int64_t run, const RecordDpSteps& steps, double delta);
  // ε spent in `run` at `delta` (0 before any round).
  result<double> spent(std::int64_t run, double delta) const;
  // From now on writes the ledger to `path` (JSON, docs/formats.md "Site DP ledger") after
  // every record, continuing with the runs the file holds. A missing file is an empty
  // start. Errors: a file that is not a ledger or is damaged (invalid_argument / data_loss,
  // naming the path; it is not overwritten: a site must not forget spent privacy by
  // accident), or one that cannot be read (io_error).
  result<void> persist_to(std::string path);

 private:
  result<double> epsilon_of(const std::vector<RecordDpSteps>& steps, double delta) const;
  result<void> write() const;

  std::uint64_t records_;
  std::map<std::int64_t, std::vector<RecordDpSteps>> runs_;
  std::string path_;  // empty: memory only
};

}  // namespace fedcore::client
