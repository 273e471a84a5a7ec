// The JSON metadata of SecAgg+ messages (docs/protocol.md, message types 40-48). Every
// message names its run, round and the client's round nonce, so nothing from another
// round can be replayed into this one. Binary fields travel as lowercase hex; the masked
// input travels as the frame's payload (d + 1 little-endian 32-bit words).
//
// parse_* return invalid_argument naming the field for anything missing, mistyped or
// oversized; limits: 1024 neighbours, shares or ids per message, 8 KiB per certificate,
// 1 KiB per signature.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shared/secagg/messages.hpp"
#include "shared/util/error.hpp"

namespace fedcore::secagg {

struct Envelope {
  std::int64_t run = 0;
  std::int64_t round = 0;
  std::string nonce;  // the client's nonce for this round (32 hex digits)
};

template <class Body>
struct Wire {
  Envelope envelope;
  Body body;
};

std::string to_metadata(const Envelope& e, const AdvertisedKeys& m);
std::string to_metadata(const Envelope& e, const NeighbourKeys& m);
std::string to_metadata(const Envelope& e, const SharesUpload& m);
std::string to_metadata(const Envelope& e, const RelayedShares& m);
std::string to_metadata(const Envelope& e);  // masked input: the envelope only
std::string to_metadata(const Envelope& e, const SurvivorList& m);
std::string to_metadata(const Envelope& e, const SurvivorSignature& m);
std::string to_metadata(const Envelope& e, const UnmaskRequest& m);
std::string to_metadata(const Envelope& e, const UnmaskResponse& m);

result<Wire<AdvertisedKeys>> parse_advertised_keys(std::string_view metadata);
result<Wire<NeighbourKeys>> parse_neighbour_keys(std::string_view metadata);
result<Wire<SharesUpload>> parse_shares_upload(std::string_view metadata);
result<Wire<RelayedShares>> parse_relayed_shares(std::string_view metadata);
result<Envelope> parse_masked_input(std::string_view metadata);
result<Wire<SurvivorList>> parse_survivor_list(std::string_view metadata);
result<Wire<SurvivorSignature>> parse_survivor_signature(std::string_view metadata);
result<Wire<UnmaskRequest>> parse_unmask_request(std::string_view metadata);
result<Wire<UnmaskResponse>> parse_unmask_response(std::string_view metadata);

}  // namespace fedcore::secagg
