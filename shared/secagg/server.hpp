// The server's side of one SecAgg+ round: it routes keys and sealed shares, sums masked
// inputs as they arrive, and at the end rebuilds from t-of-k shares exactly the secrets
// that remove the masks -- the self masks of the survivors and the pairwise masks that
// survivors added with clients that dropped after sharing. It never sees a client's
// update on its own: the only plaintext it ever holds is the sum.
//
//   on_advertise* -> close_advertising()  U1: who advertised; the masking graph over U1
//   on_shares*    -> close_sharing()      U2: who shared; each client's relayed shares
//   on_masked*    -> close_masking()      U3: who sent a masked input; the survivor list
//   on_signature* -> close_consistency()  U4: who signed U3; each one's unmask request,
//                                         with its neighbours' signatures
//   on_unmask*    -> finish()             the weighted mean update
// Every close_* fails (failed_precondition, saying how many of how many) when fewer than
// t clients are left, and the round is then lost; finish() fails when some secret cannot
// be rebuilt from t shares. Inputs from a client outside the current stage's set, twice,
// or malformed are refused (invalid_argument / failed_precondition) and change nothing.
//
// Memory: one running sum of d + 1 words, whatever the number of clients; masks are
// expanded in fixed-size blocks (crypto.hpp add_mask).
//
// Thread safety: none; the run controller's strand.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "shared/secagg/messages.hpp"
#include "shared/secagg/plan.hpp"
#include "shared/util/error.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::secagg {

enum class ServerStage { advertising, sharing, masking, consistency, unmasking, finished, failed };

struct SecAggResult {
  std::vector<float> mean_delta;          // sum_i w_i delta_i / sum_i w_i
  double total_weight = 0;                // sum_i w_i as decoded
  std::vector<std::string> contributors;  // U3
  std::vector<double> metric_sums;        // the plan's metric slots, summed over U3
};

class SecAggServer {
 public:
  // `selected`: the round's clients; `dimension`: d (the model's parameter count).
  SecAggServer(std::int64_t run, std::int64_t round, RoundPlan plan,
               std::vector<std::string> selected, std::size_t dimension);

  ServerStage stage() const noexcept { return stage_; }
  const RoundPlan& plan() const noexcept { return plan_; }

  result<void> on_advertise(const std::string& client_id, AdvertisedKeys keys);
  // The keys each advertiser's neighbours published, keyed by recipient.
  result<std::map<std::string, NeighbourKeys>> close_advertising(Rng& graph_rng);

  result<void> on_shares(const std::string& client_id, const SharesUpload& upload);
  result<std::map<std::string, RelayedShares>> close_sharing();

  // `masked`: d + 1 + plan.metric_slots words.
  result<void> on_masked(const std::string& client_id, std::span<const std::uint32_t> masked);
  // The same list for every survivor.
  result<SurvivorList> close_masking();

  // Errors also: permission_denied (no signature in a round that binds keys).
  result<void> on_signature(const std::string& client_id, const SurvivorSignature& signature);
  // The unmask request for each client that signed: U3, U2 minus U3, and the signatures
  // of its neighbours that signed.
  result<std::map<std::string, UnmaskRequest>> close_consistency();

  result<void> on_unmask(const std::string& client_id, const UnmaskResponse& response);
  result<SecAggResult> finish();

  // Who reached each stage (for the round's per-client record).
  const std::set<std::string>& advertised() const noexcept { return u1_; }
  const std::set<std::string>& shared() const noexcept { return u2_; }
  const std::set<std::string>& masked() const noexcept { return u3_; }
  const std::set<std::string>& signed_survivors() const noexcept { return u4_; }
  const std::set<std::string>& unmasked() const noexcept { return u5_; }
  const std::set<std::string>& expected_now() const noexcept;  // whom the stage waits for

 private:
  result<void> in_stage(ServerStage wanted, const std::string& client_id,
                        const std::set<std::string>& allowed, const std::set<std::string>& done,
                        const char* what) const;
  // Fails the round when fewer than `needed` (0: the threshold) clients reached a stage.
  result<void> enough(std::size_t have, const char* stage_name, std::uint32_t needed = 0);

  std::int64_t run_;
  std::int64_t round_;
  RoundPlan plan_;
  std::set<std::string> selected_;
  std::size_t dimension_;
  ServerStage stage_ = ServerStage::advertising;
  std::map<std::string, AdvertisedKeys> keys_;
  std::map<std::string, std::set<std::string>> neighbours_;
  // relayed_[to][from] = the sealed share `from` addressed to `to`
  std::map<std::string, std::map<std::string, Bytes>> relayed_;
  std::vector<std::uint32_t> sum_;
  // shares_[owner] = the revealed shares of owner's one secret the server may rebuild
  std::map<std::string, std::vector<Share>> shares_;
  std::map<std::string, Bytes> signatures_;  // over U3, from U4
  std::set<std::string> u1_, u2_, u3_, u4_, u5_;
};

}  // namespace fedcore::secagg
