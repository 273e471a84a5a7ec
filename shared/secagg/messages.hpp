// What SecAgg+ clients and the server say to each other in one round, as structs (their
// JSON form is in shared/secagg/wire.hpp; the message types in docs/protocol.md).
//
//   server -> client  TRAIN with privacy.secure_aggregation (the round's plan)
//   client -> server  AdvertisedKeys     (stage 1, after local training)
//   server -> client  NeighbourKeys      (the client's neighbours' keys, signed)
//   client -> server  SharesUpload       (stage 2: sealed Shamir shares, one per neighbour)
//   server -> client  RelayedShares      (the sealed shares addressed to this client)
//   client -> server  masked input       (stage 3: d + 1 words mod 2^32, a frame payload)
//   server -> client  SurvivorList       (U3: who sent a masked input, the same for all)
//   client -> server  SurvivorSignature  (stage 4, the consistency check: U3, signed)
//   server -> client  UnmaskRequest      (U3, who dropped after sharing, the neighbours'
//                                         signatures over U3)
//   client -> server  UnmaskResponse     (stage 5: one kind of share per neighbour)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shared/secagg/crypto.hpp"
#include "shared/secagg/plan.hpp"
#include "shared/secagg/shamir.hpp"

namespace fedcore::secagg {

struct AdvertisedKeys {
  std::string client_id;
  Bytes cipher_public;          // X25519, encrypts shares between two clients
  Bytes mask_public;            // X25519, seeds the pairwise mask
  Bytes signature;              // over binding_message(); empty when the run does not bind keys
  std::string certificate_pem;  // relayed by the server (from the TLS handshake or the client)
};

struct NeighbourKeys {
  RoundPlan plan;
  std::vector<AdvertisedKeys> neighbours;  // x of the share for neighbours[i] is i + 1
};

struct SealedShare {
  std::string peer;  // upload: the recipient; relay: the sender
  Bytes sealed;      // AES-256-GCM of the share pair
};

struct SharesUpload {
  std::vector<SealedShare> shares;
};

struct RelayedShares {
  std::vector<SealedShare> shares;
};

// The consistency check (Bonawitz et al. 2017, round 3, for a malicious server): every
// survivor is told the same survivor list and signs it; a client reveals shares only for
// the list it signed, and only when enough of its neighbours signed that very list.
struct SurvivorList {
  std::vector<std::string> survivors;  // U3, sorted
};

struct SurvivorSignature {
  Bytes signature;  // over survivors_message(); empty when the client has no signing key
};

struct Attestation {
  std::string client_id;  // a neighbour of the recipient that signed
  Bytes signature;
};

struct UnmaskRequest {
  std::vector<std::string> survivors;   // sent a masked input (the signed list)
  std::vector<std::string> dropped;     // shared keys, then sent no masked input
  std::vector<Attestation> signatures;  // the recipient's neighbours that signed `survivors`
};

enum class SecretKind : std::uint8_t {
  self_mask,  // the seed of a survivor's self mask
  mask_key,   // the mask private key of a client that dropped after sharing
};

struct RevealedShare {
  std::string owner;  // whose secret this is a share of
  SecretKind kind = SecretKind::self_mask;
  Share share;
};

struct UnmaskResponse {
  std::vector<RevealedShare> shares;
};

}  // namespace fedcore::secagg
