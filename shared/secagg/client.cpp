#include "shared/secagg/client.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include <openssl/crypto.h>

#include "shared/secagg/quantize.hpp"

namespace fedcore::secagg {
namespace {

enum class Step { advertise, share_keys, masked_input, sign_survivors, unmask, done };

std::string pair_label(std::string_view purpose, std::int64_t run, std::int64_t round,
                       std::string_view a, std::string_view b) {
  const bool ordered = a < b;
  return std::string(purpose) + "|" + std::to_string(run) + "|" + std::to_string(round) + "|" +
         std::string(ordered ? a : b) + "|" + std::string(ordered ? b : a);
}

std::string share_aad(std::int64_t run, std::int64_t round, std::string_view from,
                      std::string_view to) {
  return "fedcore-secagg-share|" + std::to_string(run) + "|" + std::to_string(round) + "|" +
         std::string(from) + "|" + std::string(to);
}

// A share pair as sealed: x (4 bytes, little-endian), then the self-mask seed's share,
// then the mask key's share.
constexpr std::size_t kPairSize = 4 + 2 * kShareValueSize;

struct HeldShares {
  Share self_mask;
  Share mask_key;
};

}  // namespace

std::string mask_label(std::int64_t run, std::int64_t round, std::string_view a,
                       std::string_view b) {
  return pair_label("fedcore-secagg-mask", run, round, a, b);
}

MaskSign pair_sign(std::string_view self, std::string_view peer) noexcept {
  return self < peer ? MaskSign::add : MaskSign::subtract;
}

struct SecAggClient::State {
  State(ClientRound r, AgreementKey cipher, AgreementKey mask)
      : round(std::move(r)), cipher_key(std::move(cipher)), mask_key(std::move(mask)) {}
  ClientRound round;
  Step step = Step::advertise;
  AgreementKey cipher_key;
  AgreementKey mask_key;
  RoundPlan plan;
  Seed self_mask_seed{};
  std::map<std::string, AdvertisedKeys> neighbours;
  std::map<std::string, Seed> cipher_seeds;  // per neighbour, for sealing and opening
  std::map<std::string, HeldShares> held;    // shares of neighbours' secrets we hold
  std::map<std::string, SecretKind> revealed;
  std::vector<std::string> signed_survivors;  // U3 as we signed it, sorted

  ~State() { OPENSSL_cleanse(self_mask_seed.data(), self_mask_seed.size()); }

  // The consistency check's second half: at least t distinct neighbours that shared with
  // us and are on the list we signed have signed that same list, each with the key of
  // the certificate its round keys were bound to. Signatures that do not verify are not
  // counted (a corrupt neighbour cannot stop the round on its own); without a trust
  // anchor nothing can be verified and nothing is counted.
  result<void> check_attestations(const std::vector<Attestation>& signatures) const {
    if (!round.trust) {
      return {};
    }
    const std::string message = survivors_message(round.run, round.round, signed_survivors);
    std::set<std::string> verified;
    for (const auto& a : signatures) {
      const auto neighbour = neighbours.find(a.client_id);
      if (neighbour == neighbours.end() || held.count(a.client_id) == 0 ||
          !std::binary_search(signed_survivors.begin(), signed_survivors.end(), a.client_id) ||
          verified.count(a.client_id) != 0) {
        continue;
      }
      if (round.trust->verify(neighbour->second.certificate_pem, a.client_id, message,
                              a.signature)) {
        verified.insert(a.client_id);
      }
    }
    if (verified.size() < plan.threshold) {
      return fail(errc::permission_denied,
                  "secure aggregation: " + std::to_string(verified.size()) +
                      " of our neighbours' signatures over the survivor list verify, fewer than "
                      "the threshold " +
                      std::to_string(plan.threshold) + ": nothing revealed");
    }
    return {};
  }

  result<void> expect(Step wanted, const char* what) const {
    if (step != wanted) {
      return fail(errc::failed_precondition,
                  std::string("secure aggregation: ") + what + " out of order");
    }
    return {};
  }
};

SecAggClient::SecAggClient(std::unique_ptr<State> state) : state_(std::move(state)) {}
SecAggClient::SecAggClient(SecAggClient&&) noexcept = default;
SecAggClient& SecAggClient::operator=(SecAggClient&&) noexcept = default;
SecAggClient::~SecAggClient() = default;

const RoundPlan& SecAggClient::plan() const noexcept {
  return state_->plan;
}

result<SecAggClient> SecAggClient::start(ClientRound round) {
  auto cipher = AgreementKey::generate();
  auto mask = AgreementKey::generate();
  if (!cipher || !mask) {
    return fail(errc::internal, "cannot generate secure-aggregation keys");
  }
  auto state = std::make_unique<State>(std::move(round), std::move(*cipher), std::move(*mask));
  return SecAggClient(std::move(state));
}

AdvertisedKeys SecAggClient::advertise() {
  auto& s = *state_;
  AdvertisedKeys keys;
  keys.client_id = s.round.client_id;
  keys.cipher_public = s.cipher_key.public_key();
  keys.mask_public = s.mask_key.public_key();
  if (s.round.signer) {
    keys.signature = s.round.signer->sign(binding_message(
        s.round.run, s.round.round, keys.client_id, keys.cipher_public, keys.mask_public));
    keys.certificate_pem = s.round.signer->certificate_pem();
  }
  if (s.step == Step::advertise) {
    s.step = Step::share_keys;
  }
  return keys;
}

result<SharesUpload> SecAggClient::share_keys(const NeighbourKeys& keys) {
  auto& s = *state_;
  if (auto ok = s.expect(Step::share_keys, "share keys"); !ok) {
    return ok.error();
  }
  const auto& plan = keys.plan;
  const auto k = keys.neighbours.size();
  if (2 * plan.threshold <= plan.degree || plan.threshold > plan.degree || k > plan.degree ||
      k < plan.threshold) {
    return fail(errc::invalid_argument,
                "secure aggregation: refusing a plan with threshold " +
                    std::to_string(plan.threshold) + ", degree " + std::to_string(plan.degree) +
                    " and " + std::to_string(k) +
                    " neighbours (the threshold must be a strict majority of the degree and "
                    "at most the neighbours)");
  }
  if (plan.bind_keys && !s.round.trust) {
    return fail(errc::failed_precondition,
                "secure aggregation: the round binds keys to certificates and this site has no "
                "CA to check them with");
  }
  for (const auto& n : keys.neighbours) {
    if (n.client_id == s.round.client_id || s.neighbours.count(n.client_id) != 0) {
      return fail(errc::invalid_argument,
                  "secure aggregation: neighbour '" + n.client_id + "' is ourselves or twice");
    }
    if (s.round.trust) {
      if (n.signature.empty()) {
        return fail(errc::permission_denied,
                    "secure aggregation: neighbour '" + n.client_id + "' sent unsigned keys");
      }
      auto verified = s.round.trust->verify(
          n.certificate_pem, n.client_id,
          binding_message(s.round.run, s.round.round, n.client_id, n.cipher_public, n.mask_public),
          n.signature);
      if (!verified) {
        return verified.error();
      }
    }
    auto seed = s.cipher_key.agree(n.cipher_public,
                                   pair_label("fedcore-secagg-cipher", s.round.run, s.round.round,
                                              s.round.client_id, n.client_id));
    if (!seed) {
      return fail(errc::invalid_argument,
                  "secure aggregation: neighbour '" + n.client_id + "': " + seed.error().message);
    }
    if (n.mask_public.size() != kPublicKeySize) {
      return fail(errc::invalid_argument,
                  "secure aggregation: neighbour '" + n.client_id + "' has a malformed mask key");
    }
    s.cipher_seeds[n.client_id] = *seed;
    s.neighbours[n.client_id] = n;
  }
  s.plan = plan;
  s.self_mask_seed = random_seed();
  const auto mask_private = s.mask_key.private_key();
  auto self_shares = shamir_split(s.self_mask_seed, plan.threshold, static_cast<std::uint32_t>(k));
  auto key_shares = shamir_split(mask_private, plan.threshold, static_cast<std::uint32_t>(k));
  if (!self_shares || !key_shares) {
    return fail(errc::internal, "secure aggregation: cannot split the round's secrets");
  }
  SharesUpload upload;
  for (std::size_t i = 0; i < k; ++i) {
    const auto& to = keys.neighbours[i].client_id;
    Bytes pair(kPairSize);
    const std::uint32_t x = (*self_shares)[i].x;
    std::memcpy(pair.data(), &x, 4);
    std::copy((*self_shares)[i].y.begin(), (*self_shares)[i].y.end(), pair.begin() + 4);
    std::copy((*key_shares)[i].y.begin(), (*key_shares)[i].y.end(),
              pair.begin() + 4 + kShareValueSize);
    upload.shares.push_back(
        {to, seal(s.cipher_seeds[to], pair,
                  share_aad(s.round.run, s.round.round, s.round.client_id, to))});
    OPENSSL_cleanse(pair.data(), pair.size());
  }
  s.step = Step::masked_input;
  return upload;
}

std::size_t SecAggClient::masked_words(std::size_t parameters) const noexcept {
  return parameters + 1 + state_->plan.metric_slots;
}

result<std::vector<std::uint32_t>> SecAggClient::masked_input(const RelayedShares& relayed,
                                                              std::span<const float> delta,
                                                              double weight, Rng& rounding,
                                                              std::span<const double> metrics) {
  std::vector<std::uint32_t> words(masked_words(delta.size()));
  if (auto ok = masked_input(relayed, delta, weight, rounding, metrics,
                             std::as_writable_bytes(std::span(words)));
      !ok) {
    return ok.error();
  }
  return words;
}

result<void> SecAggClient::masked_input(const RelayedShares& relayed, std::span<const float> delta,
                                        double weight, Rng& rounding,
                                        std::span<const double> metrics, std::span<std::byte> out) {
  auto& s = *state_;
  if (auto ok = s.expect(Step::masked_input, "masked input"); !ok) {
    return ok.error();
  }
  if (!(weight > 0 && weight <= 1)) {
    return fail(errc::invalid_argument,
                "secure aggregation: the update's weight must be in (0, 1]");
  }
  if (out.size() != masked_words(delta.size()) * sizeof(std::uint32_t)) {
    return fail(errc::invalid_argument, "secure aggregation: the output holds " +
                                            std::to_string(out.size()) + " bytes, not " +
                                            std::to_string(masked_words(delta.size()) * 4));
  }
  if (!std::all_of(delta.begin(), delta.end(), [](float v) { return std::isfinite(v); })) {
    return fail(errc::invalid_argument, "secure aggregation: the update is not finite");
  }
  for (const auto& share : relayed.shares) {
    auto seed = s.cipher_seeds.find(share.peer);
    if (seed == s.cipher_seeds.end() || s.held.count(share.peer) != 0) {
      return fail(errc::invalid_argument, "secure aggregation: a share from '" + share.peer +
                                              "', not a neighbour or twice");
    }
    auto pair = open(seed->second, share.sealed,
                     share_aad(s.round.run, s.round.round, share.peer, s.round.client_id));
    if (!pair) {
      return fail(errc::data_loss, "secure aggregation: the share from '" + share.peer +
                                       "': " + pair.error().message);
    }
    if (pair->size() != kPairSize) {
      return fail(errc::data_loss,
                  "secure aggregation: the share from '" + share.peer + "' has the wrong size");
    }
    HeldShares held;
    std::memcpy(&held.self_mask.x, pair->data(), 4);
    held.mask_key.x = held.self_mask.x;
    held.self_mask.y.assign(pair->begin() + 4, pair->begin() + 4 + kShareValueSize);
    held.mask_key.y.assign(pair->begin() + 4 + kShareValueSize, pair->end());
    OPENSSL_cleanse(pair->data(), pair->size());
    s.held[share.peer] = std::move(held);
  }
  if (s.held.size() < s.plan.threshold) {
    return fail(errc::failed_precondition, "secure aggregation: only " +
                                               std::to_string(s.held.size()) +
                                               " neighbours shared keys, the threshold is " +
                                               std::to_string(s.plan.threshold));
  }
  if (metrics.size() != s.plan.metric_slots) {
    return fail(errc::invalid_argument, "secure aggregation: " + std::to_string(metrics.size()) +
                                            " metric values for " +
                                            std::to_string(s.plan.metric_slots) + " slots");
  }
  std::vector<MaskStream> masks{{s.self_mask_seed, MaskSign::add}};
  for (const auto& [peer, unused] : s.held) {
    auto seed = s.mask_key.agree(s.neighbours[peer].mask_public,
                                 mask_label(s.round.run, s.round.round, s.round.client_id, peer));
    if (!seed) {
      return fail(errc::invalid_argument,
                  "secure aggregation: neighbour '" + peer + "': " + seed.error().message);
    }
    masks.push_back({*seed, pair_sign(s.round.client_id, peer)});
  }
  // Word i is weight·delta[i] for i < d, then the weight, then the metrics; each block is
  // encoded, masked with every stream and copied out while it is in L1.
  MaskStreams streams(masks);
  for (auto& m : masks) {
    OPENSSL_cleanse(m.seed.data(), m.seed.size());
  }
  Encoder encode(s.plan, rounding);
  const std::size_t d = delta.size();
  const std::size_t total = masked_words(d);
  std::array<std::uint32_t, MaskStreams::kBlockWords> block{};
  for (std::size_t start = 0; start < total; start += block.size()) {
    const std::size_t n = std::min(block.size(), total - start);
    const std::size_t from_delta = start < d ? std::min(n, d - start) : 0;
    for (std::size_t i = 0; i < from_delta; ++i) {
      block[i] = encode(weight * double(delta[start + i]));
    }
    for (std::size_t i = from_delta; i < n; ++i) {
      const std::size_t word = start + i;
      block[i] = word == d ? encode(weight) : encode(metrics[word - d - 1]);
    }
    streams.apply(std::span(block).first(n));
    std::memcpy(out.data() + start * sizeof(std::uint32_t), block.data(),
                n * sizeof(std::uint32_t));
  }
  s.step = Step::sign_survivors;
  return {};
}

result<SurvivorSignature> SecAggClient::sign_survivors(const SurvivorList& list) {
  auto& s = *state_;
  if (auto ok = s.expect(Step::sign_survivors, "survivor list"); !ok) {
    return ok.error();
  }
  std::vector<std::string> survivors = list.survivors;
  std::sort(survivors.begin(), survivors.end());
  if (std::adjacent_find(survivors.begin(), survivors.end()) != survivors.end()) {
    return fail(errc::invalid_argument,
                "secure aggregation: the survivor list names a client twice");
  }
  const auto on_list = [&](const std::string& id) {
    return std::binary_search(survivors.begin(), survivors.end(), id);
  };
  // Our neighbours that shared with us and survived: the only clients whose signatures
  // we can check, and the ones that must reveal our self mask's shares.
  const auto neighbours_on_list = static_cast<std::size_t>(
      std::count_if(s.held.begin(), s.held.end(), [&](const auto& h) { return on_list(h.first); }));
  // The plan's min_survivors too: our distributed-DP noise was sized for that many, so a
  // shorter list would unmask an under-noised sum.
  if (survivors.size() < required_survivors(s.plan) || neighbours_on_list < s.plan.threshold ||
      !on_list(s.round.client_id)) {
    return fail(errc::failed_precondition,
                "secure aggregation: " + std::to_string(survivors.size()) + " survivors (" +
                    std::to_string(required_survivors(s.plan)) + " needed), " +
                    std::to_string(neighbours_on_list) + " of them our neighbours (threshold " +
                    std::to_string(s.plan.threshold) +
                    "), or we are not among them: nothing signed, nothing will be revealed");
  }
  SurvivorSignature out;
  if (s.round.signer) {
    out.signature = s.round.signer->sign(survivors_message(s.round.run, s.round.round, survivors));
  }
  s.signed_survivors = std::move(survivors);
  s.step = Step::unmask;
  return out;
}

result<UnmaskResponse> SecAggClient::unmask(const UnmaskRequest& request) {
  auto& s = *state_;
  if (auto ok = s.expect(Step::unmask, "unmask"); !ok) {
    return ok.error();
  }
  std::vector<std::string> asked = request.survivors;
  std::sort(asked.begin(), asked.end());
  if (asked != s.signed_survivors) {
    return fail(errc::permission_denied,
                "secure aggregation: the unmask request names other survivors than the list "
                "this client signed: nothing revealed");
  }
  if (auto ok = s.check_attestations(request.signatures); !ok) {
    return ok.error();
  }
  const std::set<std::string> survivors(asked.begin(), asked.end());
  const std::set<std::string> dropped(request.dropped.begin(), request.dropped.end());
  UnmaskResponse response;
  auto reveal = [&](const std::string& owner, SecretKind kind) -> result<void> {
    auto held = s.held.find(owner);
    if (held == s.held.end()) {
      return {};  // not our neighbour, or it never shared with us
    }
    auto before = s.revealed.find(owner);
    if (before != s.revealed.end() && before->second != kind) {
      return fail(errc::permission_denied,
                  "secure aggregation: asked for both secrets of '" + owner + "'");
    }
    s.revealed[owner] = kind;
    response.shares.push_back(
        {owner, kind,
         kind == SecretKind::self_mask ? held->second.self_mask : held->second.mask_key});
    return {};
  };
  for (const auto& id : survivors) {
    if (dropped.count(id) != 0) {
      return fail(errc::permission_denied,
                  "secure aggregation: '" + id + "' is both a survivor and dropped");
    }
  }
  for (const auto& id : survivors) {
    if (auto ok = reveal(id, SecretKind::self_mask); !ok) {
      return ok.error();
    }
  }
  for (const auto& id : dropped) {
    if (auto ok = reveal(id, SecretKind::mask_key); !ok) {
      return ok.error();
    }
  }
  s.step = Step::done;
  return response;
}

}  // namespace fedcore::secagg
