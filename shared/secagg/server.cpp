#include "shared/secagg/server.hpp"

#include <algorithm>

#include <openssl/crypto.h>

#include "shared/secagg/client.hpp"
#include "shared/secagg/crypto.hpp"
#include "shared/secagg/graph.hpp"
#include "shared/secagg/quantize.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::secagg {

SecAggServer::SecAggServer(std::int64_t run, std::int64_t round, RoundPlan plan,
                           std::vector<std::string> selected, std::size_t dimension)
    : run_(run),
      round_(round),
      plan_(plan),
      selected_(selected.begin(), selected.end()),
      dimension_(dimension) {}

const std::set<std::string>& SecAggServer::expected_now() const noexcept {
  switch (stage_) {
    case ServerStage::advertising:
      return selected_;
    case ServerStage::sharing:
      return u1_;
    case ServerStage::masking:
      return u2_;
    case ServerStage::consistency:
      return u3_;
    case ServerStage::unmasking:
      return u4_;
    case ServerStage::finished:
    case ServerStage::failed:
      break;
  }
  static const std::set<std::string> none;
  return none;
}

result<void> SecAggServer::in_stage(ServerStage wanted, const std::string& client_id,
                                    const std::set<std::string>& allowed,
                                    const std::set<std::string>& done, const char* what) const {
  if (stage_ != wanted) {
    return fail(errc::failed_precondition, std::string("secure aggregation: ") + what + " from '" +
                                               client_id + "' after its stage closed");
  }
  if (allowed.count(client_id) == 0) {
    return fail(errc::failed_precondition, std::string("secure aggregation: ") + what + " from '" +
                                               client_id +
                                               "', who is not in this stage of the round");
  }
  if (done.count(client_id) != 0) {
    return fail(errc::invalid_argument,
                std::string("secure aggregation: ") + what + " from '" + client_id + "' twice");
  }
  return {};
}

result<void> SecAggServer::enough(std::size_t have, const char* stage_name, std::uint32_t needed) {
  if (needed == 0) {
    needed = plan_.threshold;
  }
  if (have < needed) {
    stage_ = ServerStage::failed;
    const bool threshold = needed == plan_.threshold;
    return fail(errc::failed_precondition,
                std::string("secure aggregation: ") + std::to_string(have) + " of " +
                    std::to_string(selected_.size()) + " clients " + stage_name +
                    (threshold ? ", fewer than the threshold "
                               : ", fewer than the survivors its noise was sized for ") +
                    std::to_string(needed));
  }
  return {};
}

result<void> SecAggServer::on_advertise(const std::string& client_id, AdvertisedKeys keys) {
  if (auto ok = in_stage(ServerStage::advertising, client_id, selected_, u1_, "keys"); !ok) {
    return ok;
  }
  if (keys.client_id != client_id || keys.cipher_public.size() != kPublicKeySize ||
      keys.mask_public.size() != kPublicKeySize || keys.cipher_public == keys.mask_public) {
    return fail(errc::invalid_argument,
                "secure aggregation: malformed keys from '" + client_id +
                    "' (another client's id, a wrong length, or one key used twice)");
  }
  if (plan_.bind_keys && (keys.signature.empty() || keys.certificate_pem.empty())) {
    return fail(errc::permission_denied,
                "secure aggregation: '" + client_id +
                    "' sent unsigned keys; this round binds keys to certificates");
  }
  keys_[client_id] = std::move(keys);
  u1_.insert(client_id);
  return {};
}

result<std::map<std::string, NeighbourKeys>> SecAggServer::close_advertising(Rng& graph_rng) {
  FEDCORE_ASSERT(stage_ == ServerStage::advertising, "close_advertising twice");
  if (auto ok = enough(u1_.size(), "advertised keys"); !ok) {
    return ok.error();
  }
  // The graph spans the clients that advertised; a client that did not is simply absent.
  const std::vector<std::string> nodes(u1_.begin(), u1_.end());
  const auto n = static_cast<std::uint32_t>(nodes.size());
  std::uint32_t k = std::min(plan_.degree, n - 1);
  if (k % 2 != 0 && k != n - 1) {
    --k;  // Harary graphs need an even degree below n - 1
  }
  if (k < plan_.threshold) {
    stage_ = ServerStage::failed;
    return fail(errc::failed_precondition,
                "secure aggregation: " + std::to_string(n) +
                    " clients advertised keys, too few for neighbourhoods of the threshold " +
                    std::to_string(plan_.threshold));
  }
  const auto graph = harary_graph(n, k, graph_rng);
  std::map<std::string, NeighbourKeys> out;
  for (std::uint32_t i = 0; i < n; ++i) {
    auto& message = out[nodes[i]];
    message.plan = plan_;
    message.plan.degree = k;  // what each client actually has
    for (auto j : graph[i]) {
      neighbours_[nodes[i]].insert(nodes[j]);
      message.neighbours.push_back(keys_[nodes[j]]);
    }
  }
  plan_.degree = k;
  stage_ = ServerStage::sharing;
  return out;
}

result<void> SecAggServer::on_shares(const std::string& client_id, const SharesUpload& upload) {
  if (auto ok = in_stage(ServerStage::sharing, client_id, u1_, u2_, "shares"); !ok) {
    return ok;
  }
  const auto& mine = neighbours_[client_id];
  std::set<std::string> recipients;
  for (const auto& share : upload.shares) {
    if (mine.count(share.peer) == 0 || !recipients.insert(share.peer).second ||
        share.sealed.size() < kSealOverhead) {
      return fail(errc::invalid_argument, "secure aggregation: '" + client_id +
                                              "' sent a share for '" + share.peer +
                                              "' (not its neighbour, twice, or malformed)");
    }
  }
  if (recipients.size() != mine.size()) {
    return fail(errc::invalid_argument, "secure aggregation: '" + client_id + "' sent " +
                                            std::to_string(recipients.size()) + " shares for " +
                                            std::to_string(mine.size()) + " neighbours");
  }
  for (const auto& share : upload.shares) {
    relayed_[share.peer][client_id] = share.sealed;
  }
  u2_.insert(client_id);
  return {};
}

result<std::map<std::string, RelayedShares>> SecAggServer::close_sharing() {
  FEDCORE_ASSERT(stage_ == ServerStage::sharing, "close_sharing out of order");
  if (auto ok = enough(u2_.size(), "shared keys"); !ok) {
    return ok.error();
  }
  std::map<std::string, RelayedShares> out;
  for (const auto& to : u2_) {
    auto& message = out[to];
    for (const auto& [from, sealed] : relayed_[to]) {
      // Only from clients that completed sharing (all of relayed_ by construction).
      message.shares.push_back({from, sealed});
    }
  }
  relayed_.clear();
  sum_.assign(dimension_ + 1 + plan_.metric_slots, 0);
  stage_ = ServerStage::masking;
  return out;
}

result<void> SecAggServer::on_masked(const std::string& client_id,
                                     std::span<const std::uint32_t> masked) {
  if (auto ok = in_stage(ServerStage::masking, client_id, u2_, u3_, "masked input"); !ok) {
    return ok;
  }
  if (masked.size() != sum_.size()) {
    return fail(errc::invalid_argument,
                "secure aggregation: a masked input of " + std::to_string(masked.size()) +
                    " words from '" + client_id + "', expected " + std::to_string(sum_.size()));
  }
  // Summed at once and never kept: the server holds one running sum, not n inputs.
  for (std::size_t i = 0; i < masked.size(); ++i) {
    sum_[i] += masked[i];
  }
  u3_.insert(client_id);
  return {};
}

result<SurvivorList> SecAggServer::close_masking() {
  FEDCORE_ASSERT(stage_ == ServerStage::masking, "close_masking out of order");
  if (auto ok = enough(u3_.size(), "sent masked inputs", required_survivors(plan_)); !ok) {
    return ok.error();
  }
  stage_ = ServerStage::consistency;
  return SurvivorList{{u3_.begin(), u3_.end()}};
}

result<void> SecAggServer::on_signature(const std::string& client_id,
                                        const SurvivorSignature& signature) {
  if (auto ok = in_stage(ServerStage::consistency, client_id, u3_, u4_, "survivor signature");
      !ok) {
    return ok;
  }
  if (plan_.bind_keys && signature.signature.empty()) {
    return fail(errc::permission_denied,
                "secure aggregation: '" + client_id +
                    "' did not sign the survivor list; this round binds keys to certificates");
  }
  // Not verified here: the clients check what they rely on, against the certificates
  // they checked at key binding; the server only relays.
  signatures_[client_id] = signature.signature;
  u4_.insert(client_id);
  return {};
}

result<std::map<std::string, UnmaskRequest>> SecAggServer::close_consistency() {
  FEDCORE_ASSERT(stage_ == ServerStage::consistency, "close_consistency out of order");
  if (auto ok = enough(u4_.size(), "signed the survivor list"); !ok) {
    return ok.error();
  }
  UnmaskRequest common;
  common.survivors.assign(u3_.begin(), u3_.end());
  for (const auto& id : u2_) {
    if (u3_.count(id) == 0) {
      common.dropped.push_back(id);
    }
  }
  std::map<std::string, UnmaskRequest> out;
  for (const auto& to : u4_) {
    auto& request = out[to] = common;
    for (const auto& neighbour : neighbours_[to]) {
      if (const auto it = signatures_.find(neighbour); it != signatures_.end()) {
        request.signatures.push_back({neighbour, it->second});
      }
    }
  }
  signatures_.clear();
  stage_ = ServerStage::unmasking;
  return out;
}

result<void> SecAggServer::on_unmask(const std::string& client_id, const UnmaskResponse& response) {
  if (auto ok = in_stage(ServerStage::unmasking, client_id, u4_, u5_, "unmask shares"); !ok) {
    return ok;
  }
  for (const auto& revealed : response.shares) {
    const bool survivor = u3_.count(revealed.owner) != 0;
    const bool dropped = !survivor && u2_.count(revealed.owner) != 0;
    const bool right_kind = (survivor && revealed.kind == SecretKind::self_mask) ||
                            (dropped && revealed.kind == SecretKind::mask_key);
    if (!right_kind || neighbours_[client_id].count(revealed.owner) == 0 ||
        revealed.share.y.size() != kShareValueSize) {
      return fail(errc::invalid_argument, "secure aggregation: '" + client_id +
                                              "' revealed an unexpected share of '" +
                                              revealed.owner + "'");
    }
  }
  for (const auto& revealed : response.shares) {
    shares_[revealed.owner].push_back(revealed.share);
  }
  u5_.insert(client_id);
  return {};
}

result<SecAggResult> SecAggServer::finish() {
  FEDCORE_ASSERT(stage_ == ServerStage::unmasking, "finish out of order");
  auto lost = [&](const std::string& owner, const error& e) -> error {
    stage_ = ServerStage::failed;
    return fail(errc::failed_precondition,
                "secure aggregation: cannot rebuild the secret of '" + owner + "': " + e.message);
  };
  // Every mask to take away, gathered first and removed in one pass over the sum.
  std::vector<MaskStream> masks;
  struct Wipe {
    std::vector<MaskStream>& masks;
    ~Wipe() {
      for (auto& m : masks) {
        OPENSSL_cleanse(m.seed.data(), m.seed.size());
      }
    }
  } wipe{masks};
  // Survivors' self masks.
  for (const auto& u : u3_) {
    auto seed_bytes = shamir_combine(shares_[u], plan_.threshold, 32);
    if (!seed_bytes) {
      return lost(u, seed_bytes.error());
    }
    MaskStream m{{}, MaskSign::subtract};
    std::copy(seed_bytes->begin(), seed_bytes->end(), m.seed.begin());
    OPENSSL_cleanse(seed_bytes->data(), seed_bytes->size());
    masks.push_back(m);
  }
  // Pairwise masks survivors added with clients that dropped after sharing.
  for (const auto& v : u2_) {
    if (u3_.count(v) != 0) {
      continue;
    }
    auto private_key = shamir_combine(shares_[v], plan_.threshold, 32);
    if (!private_key) {
      return lost(v, private_key.error());
    }
    auto key = AgreementKey::from_private(*private_key);
    OPENSSL_cleanse(private_key->data(), private_key->size());
    if (!key) {
      return lost(v, key.error());
    }
    for (const auto& u : neighbours_[v]) {
      if (u3_.count(u) == 0) {
        continue;
      }
      auto seed = key->agree(keys_[u].mask_public, mask_label(run_, round_, u, v));
      if (!seed) {
        return lost(v, seed.error());
      }
      // u added pair_sign(u, v); take it away.
      masks.push_back(
          {*seed, pair_sign(u, v) == MaskSign::add ? MaskSign::subtract : MaskSign::add});
    }
  }
  add_masks(sum_, masks);
  SecAggResult out;
  out.mean_delta.assign(dimension_, 0.0f);
  const auto contributors = static_cast<std::uint32_t>(u3_.size());
  out.total_weight = decode_weighted_mean(std::span(sum_).first(dimension_ + 1), contributors,
                                          plan_, out.mean_delta);
  out.metric_sums = decode_values(std::span(sum_).subspan(dimension_ + 1), contributors, plan_);
  out.contributors.assign(u3_.begin(), u3_.end());
  shares_.clear();
  stage_ = ServerStage::finished;
  return out;
}

}  // namespace fedcore::secagg
