// Round: the bookkeeping of one federated round, without I/O. Given a RoundTimer, it adds
// the time it spends validating and aggregating updates to the round's phases.
//
// The orchestrator creates a Round with the sampled clients and the nonce it sent each
// of them, feeds it every update and every lost session, and asks it to close when all
// selected clients have answered or the deadline has passed. The Round decides, per
// update, whether it may touch the aggregate (binding to run, round and nonce; one
// update per client; the checks of validate_update) and, at close, whether the round
// reached quorum (docs/engineering.md R4). An update's sample count, its weight in FedAvg,
// is bounded twice: it may not exceed what the client declared in its HELLO (else it is
// rejected, samples_above_declared), and it weighs at most max_samples_per_client, so a
// client claiming billions of samples cannot dominate the average.
//
// At close:
//
//   all selected answered                      -> complete (if at least min_clients accepted)
//   target_updates accepted (over-selection)   -> complete; those still training are "late"
//   deadline passed, accepted >= min_clients   -> complete at quorum; the silent are "timeout"
//   otherwise                                  -> failed; nothing is aggregated
//
// An update that names another run or round, or carries a nonce we did not issue for
// this client, is a replay or a stale message: it is refused without using up the
// client's answer (its real update may still come) and reported as such.
//
// Thread safety: none; one round belongs to the run's coroutine.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "server/federation/aggregate.hpp"
#include "server/federation/round_timer.hpp"
#include "shared/protocol/messages.hpp"

namespace fedcore::federation {

enum class ClientStatus { ok, rejected, timeout, dropped, late };
std::string_view client_status_name(ClientStatus status) noexcept;

// What happened to one selected client in this round.
struct ClientOutcome {
  std::string client_id;
  ClientStatus status = ClientStatus::timeout;
  std::string reason;
  std::optional<Rejection> rejection;  // rejected only: why validate_update refused it
  std::uint64_t samples = 0;
  double loss = 0;
  double accuracy = 0;
  double train_seconds = 0;
  std::uint64_t bytes_up = 0;
  std::uint64_t bytes_down = 0;
  std::optional<protocol::LocalEvaluation> evaluation;
};

struct RoundSettings {
  std::int64_t run_id = 0;
  std::int64_t round = 0;
  std::size_t min_clients = 1;
  UpdateChecks checks;
  // The training samples each selected client declared in its HELLO; an update claiming
  // more is rejected. A client absent from the map is not bounded by a declaration.
  std::map<std::string, std::uint64_t> declared_samples;
  // An accepted update weighs min(its samples, this) in the aggregate; 0 = no cap.
  std::uint64_t max_samples_per_client = 0;
  // Weighted client sampling (run_config.hpp): when not empty, each selected client's update
  // weighs this (how many times the round drew it) instead of its samples.
  std::map<std::string, std::uint64_t> weights;
  // Over-selection: the round may close as soon as this many updates are accepted (more
  // clients were selected than it needs); 0 = it waits for every selected client.
  std::size_t target_updates = 0;
};

enum class UpdateVerdict {
  accepted,  // folded into the aggregate
  rejected,  // the client's answer for this round, refused with a reason
  stale,     // replay or wrong round: refused, the client may still answer
};

// Why an update was refused as stale (the client may still send its real answer). The
// names (stale_reason_name) are stable: the metrics label and the events' reason_code.
enum class StaleReason {
  replay,        // it names another run or round
  not_selected,  // the client is not part of this round
  nonce,         // the nonce is not the one issued to this client for this round
  duplicate,     // the client already answered this round
  no_round,      // no round is collecting updates (decided by the run controller)
};
std::string_view stale_reason_name(StaleReason reason) noexcept;

struct RoundClose {
  bool succeeded = false;
  std::string failure_reason;
  std::size_t accepted = 0;
  std::size_t rejected = 0;
  std::size_t timed_out = 0;
  std::size_t dropped = 0;
  std::size_t late = 0;
};

class Round {
 public:
  // `nonces` maps each selected client id to the nonce sent to it. `global` and `layout`
  // are the model the round started from; `strategy` receives accepted updates.
  // REQUIRES: strategy.begin_round(global) was called; global outlives the Round.
  Round(RoundSettings settings, std::map<std::string, std::string> nonces,
        std::span<const float> global, const model::ParamLayout& layout, Strategy& strategy,
        RoundTimer* timer = nullptr);

  // Judges one update. For `stale`, `why` says what was wrong and `stale_reason` (when not
  // null) gets the reason as a code; for `rejected` the reason and its code are also in the
  // client's outcome. `control` is the change of the site's control variate the update
  // carries (SCAFFOLD): it must be one finite value per parameter when the strategy wants
  // one, and empty otherwise (else the update is rejected, Rejection::control); an
  // accepted update's control goes to the strategy after its parameters. `step`, when not
  // null, is the update as a compressed step against the round's global model (then
  // `params` is ignored): a strategy that can fold it a chunk at a time does so, decoding
  // as it goes; for the others it is decoded whole first.
  UpdateVerdict on_update(std::string_view client_id, const protocol::UpdateReport& report,
                          std::span<const float> params, std::uint64_t bytes_up, std::string* why,
                          StaleReason* stale_reason = nullptr, std::span<const float> control = {},
                          const protocol::StepDecoder* step = nullptr);
  // A selected client's session ended before it answered.
  void on_dropped(std::string_view client_id, std::string reason);
  void set_bytes_down(std::string_view client_id, std::uint64_t bytes);
  // Secure aggregation: the client's masked update is part of the secure sum. It counts
  // as accepted; there is no update, sample count or metric of its own to record.
  void on_secure_contribution(std::string_view client_id, std::uint64_t bytes_up,
                              std::uint64_t extra_bytes_down);
  // The nonce issued to a selected client (nullptr for others).
  const std::string* nonce_of(std::string_view client_id) const;

  bool is_selected(std::string_view client_id) const;
  // False for clients that were not selected.
  bool has_answered(std::string_view client_id) const;
  bool all_answered() const noexcept { return answered_ == outcomes_.size(); }
  std::size_t accepted() const noexcept { return accepted_; }
  // Over-selection: the round has the accepted updates it needs and may close now.
  bool target_reached() const noexcept {
    return settings_.target_updates > 0 && accepted_ >= settings_.target_updates;
  }

  // Decides the round: call when all_answered(), target_reached() or at the deadline.
  // Clients that never answered become "late" when the target was reached, else
  // "timeout". On success the strategy holds the accepted updates.
  RoundClose close();
  const std::vector<ClientOutcome>& outcomes() const noexcept { return outcomes_; }
  const RoundSettings& settings() const noexcept { return settings_; }

 private:
  ClientOutcome* find(std::string_view client_id);
  // Marks a folded update's client ok, counts it and hands the strategy its control.
  UpdateVerdict accept(ClientOutcome& outcome, std::span<const float> control);
  // Why `control` does not fit the strategy (nothing when it does).
  std::optional<std::string> control_mismatch(std::span<const float> control) const;

  RoundSettings settings_;
  std::map<std::string, std::string> nonces_;
  std::span<const float> global_;
  const model::ParamLayout& layout_;
  Strategy& strategy_;
  RoundTimer* timer_;  // may be null
  std::vector<ClientOutcome> outcomes_;
  std::vector<bool> has_answered_;
  std::size_t answered_ = 0;
  std::size_t accepted_ = 0;
};

}  // namespace fedcore::federation
