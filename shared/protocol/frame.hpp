// The Fedcore wire frame: a fixed 24-byte header, a JSON metadata part and a binary
// payload. The byte layout is specified in docs/protocol.md; this header is its code.
//
//   u32 magic "FCF1" | u16 version | u16 message type | u32 metadata length |
//   u32 flags | u64 payload length | metadata (UTF-8 JSON object) | payload
//
// All integers are little-endian. Every length is checked against `FrameLimits` before
// anything is allocated, so a peer cannot make us reserve memory by announcing it.
// Parameter payloads are raw little-endian float32 in layout order, which lets a sender
// hand the model's flat span to the socket without copying (see net/frame_channel.hpp).
//
// These are pure functions over bytes: no I/O, no state; safe from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shared/util/error.hpp"

namespace fedcore::protocol {

inline constexpr std::uint32_t kFrameMagic = 0x31464346;  // bytes 'F' 'C' 'F' '1'
inline constexpr std::uint16_t kFrameVersion = 1;
inline constexpr std::size_t kFrameHeaderSize = 24;

enum class MessageType : std::uint16_t {
  hello = 1,       // client -> server: sample count, schema, capabilities
  welcome = 2,     // server -> client: accepted, the identity the server saw
  heartbeat = 3,   // either way: liveness
  train = 4,       // server -> client: global model (payload) + round config
  update = 5,      // client -> server: trained parameters (payload) + metrics
  evaluate = 6,    // server -> client: model to evaluate on the local test split
  evaluation = 7,  // client -> server: evaluation metrics
  error = 8,       // either way: a refusal with {code, message}; the sender then closes
  goodbye = 9,     // either way: orderly close
  // A run's federated feature scale, asked once before its first round (docs/protocol.md).
  feature_stats_request = 10,  // server -> client: report your training split's moments
  feature_stats = 11,          // client -> server: per feature count, sum, sum of squares
  // In-datacenter jobs (shared/collective, distributed/); the federation refuses them.
  peer_hello = 16,    // rank -> rank: job, rank, size, shared-memory ring offer
  peer_welcome = 17,  // rank -> rank: accepted; shared-memory ring settlement
  collective = 18,    // rank -> rank: one collective message (envelope + data payload)
  join = 32,          // rank -> rendezvous: job, rank, world size, the rank's address
  roster = 33,        // rendezvous -> every rank: the addresses of all ranks
  // Secure aggregation (SecAgg+, shared/secagg), in the order of a round.
  secagg_keys = 40,        // client -> server: its round keys, signed (after training)
  secagg_neighbours = 41,  // server -> client: the plan and its neighbours' keys
  secagg_shares = 42,      // client -> server: sealed Shamir shares, one per neighbour
  secagg_relay = 43,       // server -> client: the sealed shares addressed to it
  secagg_masked = 44,      // client -> server: the masked update (payload: d + 1 words)
  secagg_unmask = 45,      // server -> client: who survived, who dropped, signatures
  secagg_revealed = 46,    // client -> server: the shares that remove the masks
  secagg_survivors = 47,   // server -> client: the survivor list, to sign (consistency)
  secagg_signed = 48,      // client -> server: its signature over the survivor list
};

// "hello", "train", ... or "unknown".
std::string_view message_type_name(MessageType type) noexcept;
bool is_known_message_type(std::uint16_t value) noexcept;

struct FrameLimits {
  std::uint32_t max_metadata_bytes = 64 * 1024;
  std::uint64_t max_payload_bytes = std::uint64_t{1} << 30;  // 1 GiB
};

struct FrameHeader {
  MessageType type = MessageType::heartbeat;
  std::uint32_t metadata_length = 0;
  std::uint32_t flags = 0;  // reserved, must be 0 in version 1
  std::uint64_t payload_length = 0;
};

std::array<std::byte, kFrameHeaderSize> encode_header(const FrameHeader& header) noexcept;

// Validates magic, version, type, flags and both lengths against `limits`.
// Errors: data_loss (magic), unimplemented (version), invalid_argument (type, flags),
// resource_exhausted (a length above its limit).
result<FrameHeader> decode_header(std::span<const std::byte, kFrameHeaderSize> bytes,
                                  const FrameLimits& limits);

// A whole frame held in memory.
struct Frame {
  MessageType type = MessageType::heartbeat;
  std::string metadata = "{}";
  std::vector<std::byte> payload;
};

// Header + metadata + payload in one buffer (tests, small control messages; the channel
// sends large payloads without this copy). REQUIRES: lengths within the default limits.
std::vector<std::byte> encode_frame(MessageType type, std::string_view metadata,
                                    std::span<const std::byte> payload = {});

// Parses exactly one frame occupying all of `bytes`. The metadata is not parsed here: the
// handler of the message parses it, once (shared/protocol/metadata.hpp). Errors: those of
// decode_header; out_of_range when bytes end before the announced lengths;
// invalid_argument when bytes continue past the frame.
result<Frame> decode_frame(std::span<const std::byte> bytes, const FrameLimits& limits = {});

// A float32 view of a payload. Errors: invalid_argument when the size is not a multiple
// of 4 or the data is not 4-byte aligned.
result<std::span<const float>> payload_floats(std::span<const std::byte> payload);
// The same as 32-bit unsigned words (secure aggregation's masked inputs).
result<std::span<const std::uint32_t>> payload_words(std::span<const std::byte> payload);

}  // namespace fedcore::protocol
