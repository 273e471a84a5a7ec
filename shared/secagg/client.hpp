// One client's side of one SecAgg+ round (Bell et al. 2020, on Bonawitz et al. 2017),
// message in, message out, no I/O: the client session (client/session.cpp) feeds it the
// server's messages and sends what it returns.
//
//   advertise()       fresh X25519 key pairs (share encryption, mask agreement), signed
//   share_keys()      checks every neighbour's key binding, draws the self-mask seed b,
//                     splits b and the mask private key t-of-k among the neighbours and
//                     seals each neighbour's pair of shares to it
//   masked_input()    opens the shares it received, encodes weight·delta and adds the
//                     self mask and one pairwise mask per neighbour that shared
//   sign_survivors()  the consistency check's first half: signs the survivor list U3
//                     (one list per round; at least t of our neighbours must be on it)
//   unmask()          the second half, then the reveal: only for the list we signed, and
//                     only when at least t of our neighbours' signatures over that list
//                     verify against the certificates their keys were bound to; then per
//                     neighbour the share of its self-mask seed if it survived or of its
//                     mask key if it dropped -- never both, in this or any later call
//
// What the consistency check buys (Bonawitz et al. 2017, §4; Bell et al. 2020 run it
// among neighbours): without it, a server that tells some of u's neighbours "u survived"
// and others "u dropped" gets both of u's secrets as soon as 2t - k of u's neighbours are
// corrupt and reveal both kinds; with it, an honest client reveals only for a list that
// t of its neighbours signed, and each honest client signs one list per round, so two
// honest clients with enough honest neighbours in common cannot be shown different lists.
// It needs key binding (a signer and a trust anchor): without a trust anchor the client
// still reveals only for the list it signed, but cannot check anyone else's signature.
//
// Each step may be called once, in order; a step out of order or repeated is refused
// with failed_precondition. Secrets are wiped when the object goes.
//
// Thread safety: none (one round, one coroutine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "shared/secagg/crypto.hpp"
#include "shared/secagg/key_binding.hpp"
#include "shared/secagg/messages.hpp"
#include "shared/util/error.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::secagg {

struct ClientRound {
  std::int64_t run = 0;
  std::int64_t round = 0;
  std::string client_id;  // as the server named us (WELCOME), = our certificate's CN
  // Key binding: with a signer we sign our keys; with a trust anchor we refuse neighbours
  // whose keys are not signed by a certificate of the federation CA. Both or neither.
  std::shared_ptr<const Signer> signer;
  std::shared_ptr<const TrustAnchor> trust;
};

class SecAggClient {
 public:
  // Errors: internal when OpenSSL cannot make keys.
  static result<SecAggClient> start(ClientRound round);
  SecAggClient(SecAggClient&&) noexcept;
  SecAggClient& operator=(SecAggClient&&) noexcept;
  ~SecAggClient();

  AdvertisedKeys advertise();

  // Errors: failed_precondition (out of order); invalid_argument (a plan the client cannot
  // accept: t <= k/2, fewer than t neighbours, a duplicate or ourselves among them, a
  // malformed key); permission_denied (a neighbour's key binding does not verify, or is
  // missing while we require it).
  result<SharesUpload> share_keys(const NeighbourKeys& keys);

  // The masked encoding of weight·delta, the weight and the plan's metric values
  // (d + 1 + plan().metric_slots words; `metrics` must hold metric_slots values). Shares that do
  // not open are refused (data_loss): a server that corrupts one would otherwise make us mask with
  // a peer whose mask it can later remove. Errors also: failed_precondition (out of order, or fewer
  // than t neighbours shared), invalid_argument (a share from a non-neighbour, twice from
  // one, a non-finite delta or a weight outside (0, 1]).
  result<std::vector<std::uint32_t>> masked_input(const RelayedShares& relayed,
                                                  std::span<const float> delta, double weight,
                                                  Rng& rounding,
                                                  std::span<const double> metrics = {});
  // The same words written little-endian straight into `out` (a frame's payload), block by
  // block: encoded, masked and copied while a block is in cache, with no d-sized buffer of
  // its own. REQUIRES: out.size() == masked_words(delta.size()) * 4.
  result<void> masked_input(const RelayedShares& relayed, std::span<const float> delta,
                            double weight, Rng& rounding, std::span<const double> metrics,
                            std::span<std::byte> out);
  // d + 1 + plan().metric_slots: the words of a masked input for d parameters.
  std::size_t masked_words(std::size_t parameters) const noexcept;

  // Our signature over the survivor list (empty without a signer). Errors:
  // failed_precondition (out of order; fewer than t survivors, fewer than t of our
  // neighbours among them, or we are not one); invalid_argument (an id twice).
  result<SurvivorSignature> sign_survivors(const SurvivorList& list);

  // Errors: failed_precondition (out of order); permission_denied (survivors other than
  // the list we signed, a client in both lists, fewer than t verifying neighbour
  // signatures over the list, or asked for the other kind of a neighbour's secret than
  // before).
  result<UnmaskResponse> unmask(const UnmaskRequest& request);

  const RoundPlan& plan() const noexcept;

 private:
  struct State;
  explicit SecAggClient(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The label both ends of a pair feed HKDF for their mask seed (also used by the server to
// rebuild a dropped client's masks).
std::string mask_label(std::int64_t run, std::int64_t round, std::string_view a,
                       std::string_view b);
// The sign of the pairwise mask that `self` adds for `peer` (the smaller id adds).
MaskSign pair_sign(std::string_view self, std::string_view peer) noexcept;

}  // namespace fedcore::secagg
