// The JSON metadata of a collective message sent over a socket (docs/dist.md, "Wire
// format"): the envelope and the message's number on its link, or a doorbell.
//
// A small allreduce over TCP spends a good part of its CPU on this metadata: building and
// parsing a JSON document per message with a general library cost several microseconds
// on each side. The writer here prints the one object it needs with std::to_chars, byte
// for byte what nlohmann::json::dump() prints for it (keys in sorted order); the reader
// takes exactly that form on a fast path and hands anything else (other key order,
// whitespace, escapes in the job id) to nlohmann, so any valid JSON rendering of the same
// fields still decodes, and anything malformed is errc::data_loss.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shared/collective/transport.hpp"
#include "shared/util/error.hpp"

namespace fedcore::collective {

// A doorbell: a frame with no message in it, sent to wake a peer that sleeps in the
// kernel while a message waits for it in the shared-memory ring.
inline constexpr std::string_view kDoorbellMetadata = R"({"wake":true})";

struct DecodedMetadata {
  Envelope envelope;
  std::uint64_t n = 0;  // the message's number on its link
  bool doorbell = false;
};

// {"bytes":..,"job":"..","length":..,"n":..,"op":..,"segment":..,"seq":..,"tag":..}
std::string encode_envelope(const Envelope& envelope, std::uint64_t n);

// Errors: data_loss (not JSON, a field missing or of the wrong type or range).
result<DecodedMetadata> decode_envelope(std::string_view metadata);

}  // namespace fedcore::collective
