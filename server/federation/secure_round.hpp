// SecureRound: the server's part of a secure-aggregated round (SecAgg+, shared/secagg)
// between local training and aggregation, over the sessions.
//
// The run controller (run_controller_rounds.cpp) owns one per secure round. Clients
// answer TRAIN with their keys instead of an update; then four stages follow, each
// closed when every client it waits for has answered (or dropped) or at its deadline:
//
//   collecting    secagg_keys       -> close: secagg_neighbours to each advertiser
//   sharing_keys  secagg_shares     -> close: secagg_relay to each client that shared
//   masking       secagg_masked     -> close: secagg_survivors to each survivor
//   consistency   secagg_signed     -> close: secagg_unmask (with signatures) to each signer
//   unmasking     secagg_revealed   -> finish(): the weighted mean update
//
// Every message must carry the run, round and the nonce issued to its sender for this
// round; anything else is refused with a reason and changes nothing. The server keeps
// only the running sum of masked inputs (O(model)); no client's update, norm or loss is
// ever stored (docs/privacy.md).
//
// Thread safety: none; the run controller's thread.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "server/federation/run_controller.hpp"
#include "shared/protocol/frame.hpp"
#include "shared/secagg/server.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::federation {

class SecureRound {
 public:
  SecureRound(std::int64_t run, std::int64_t round, secagg::RoundPlan plan,
              std::map<std::string, std::string> nonces, std::size_t dimension);

  // A secagg_* frame from `client_id`. Errors: invalid_argument (malformed, another
  // round's or client's nonce, wrong stage input), failed_precondition (not expected now).
  result<void> on_message(const std::string& client_id, const protocol::Frame& frame);
  // The client will not answer again (error, lost session).
  void on_dropped(const std::string& client_id);

  // Every client the current stage waits for has answered or dropped.
  bool stage_complete() const;
  // Closes the current stage and sends the next stage's messages through `sessions`.
  // Errors: failed_precondition when fewer than the threshold are left (the round fails).
  result<void> close_stage(SessionDirectory& sessions, Rng& graph_rng);
  // After the unmasking stage closed: the weighted mean update.
  result<secagg::SecAggResult> finish();

  secagg::ServerStage stage() const noexcept { return server_.stage(); }
  const secagg::RoundPlan& plan() const noexcept { return server_.plan(); }
  bool contributed(const std::string& client_id) const {
    return server_.masked().count(client_id) != 0;
  }
  // Bytes each client sent in the secure stages (keys, shares, masked input, shares).
  const std::map<std::string, std::uint64_t>& bytes_up() const noexcept { return bytes_up_; }
  std::uint64_t bytes_down(const std::string& client_id) const;
  // The last stage each client completed, for the round's per-client record.
  std::string progress_of(const std::string& client_id) const;

 private:
  std::int64_t run_;
  std::int64_t round_;
  std::map<std::string, std::string> nonces_;
  secagg::SecAggServer server_;
  std::set<std::string> dropped_;
  std::map<std::string, std::uint64_t> bytes_up_;
  std::map<std::string, std::uint64_t> bytes_down_;
};

}  // namespace fedcore::federation
