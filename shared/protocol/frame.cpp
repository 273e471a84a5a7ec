#include "shared/protocol/frame.hpp"

#include <bit>
#include <cstring>

#include "shared/util/assert.hpp"

namespace fedcore::protocol {
namespace {

static_assert(std::endian::native == std::endian::little,
              "frames are little-endian and are encoded with memcpy");

template <class T>
void put(std::byte* at, T value) {
  std::memcpy(at, &value, sizeof value);
}

template <class T>
T get(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

}  // namespace

std::string_view message_type_name(MessageType type) noexcept {
  switch (type) {
    case MessageType::hello:
      return "hello";
    case MessageType::welcome:
      return "welcome";
    case MessageType::heartbeat:
      return "heartbeat";
    case MessageType::train:
      return "train";
    case MessageType::update:
      return "update";
    case MessageType::evaluate:
      return "evaluate";
    case MessageType::evaluation:
      return "evaluation";
    case MessageType::error:
      return "error";
    case MessageType::goodbye:
      return "goodbye";
    case MessageType::feature_stats_request:
      return "feature_stats_request";
    case MessageType::feature_stats:
      return "feature_stats";
    case MessageType::peer_hello:
      return "peer_hello";
    case MessageType::peer_welcome:
      return "peer_welcome";
    case MessageType::collective:
      return "collective";
    case MessageType::join:
      return "join";
    case MessageType::roster:
      return "roster";
    case MessageType::secagg_keys:
      return "secagg_keys";
    case MessageType::secagg_neighbours:
      return "secagg_neighbours";
    case MessageType::secagg_shares:
      return "secagg_shares";
    case MessageType::secagg_relay:
      return "secagg_relay";
    case MessageType::secagg_masked:
      return "secagg_masked";
    case MessageType::secagg_unmask:
      return "secagg_unmask";
    case MessageType::secagg_revealed:
      return "secagg_revealed";
    case MessageType::secagg_survivors:
      return "secagg_survivors";
    case MessageType::secagg_signed:
      return "secagg_signed";
  }
  return "unknown";
}

bool is_known_message_type(std::uint16_t value) noexcept {
  return message_type_name(static_cast<MessageType>(value)) != "unknown";
}

std::array<std::byte, kFrameHeaderSize> encode_header(const FrameHeader& header) noexcept {
  std::array<std::byte, kFrameHeaderSize> bytes{};
  put(bytes.data() + 0, kFrameMagic);
  put(bytes.data() + 4, kFrameVersion);
  put(bytes.data() + 6, static_cast<std::uint16_t>(header.type));
  put(bytes.data() + 8, header.metadata_length);
  put(bytes.data() + 12, header.flags);
  put(bytes.data() + 16, header.payload_length);
  return bytes;
}

result<FrameHeader> decode_header(std::span<const std::byte, kFrameHeaderSize> bytes,
                                  const FrameLimits& limits) {
  if (get<std::uint32_t>(bytes.data()) != kFrameMagic) {
    return fail(errc::data_loss,
                "frame: wrong magic (not a Fedcore peer, or the stream lost sync)");
  }
  const auto version = get<std::uint16_t>(bytes.data() + 4);
  if (version != kFrameVersion) {
    return fail(errc::unimplemented, "frame: protocol version " + std::to_string(version) +
                                         " is not supported (this build speaks version 1)");
  }
  const auto type = get<std::uint16_t>(bytes.data() + 6);
  if (!is_known_message_type(type)) {
    return fail(errc::invalid_argument, "frame: unknown message type " + std::to_string(type));
  }
  FrameHeader header;
  header.type = static_cast<MessageType>(type);
  header.metadata_length = get<std::uint32_t>(bytes.data() + 8);
  header.flags = get<std::uint32_t>(bytes.data() + 12);
  header.payload_length = get<std::uint64_t>(bytes.data() + 16);
  if (header.flags != 0) {
    return fail(errc::invalid_argument, "frame: flags must be 0 in version 1");
  }
  if (header.metadata_length > limits.max_metadata_bytes) {
    return fail(errc::resource_exhausted,
                "frame: metadata of " + std::to_string(header.metadata_length) +
                    " bytes exceeds the limit of " + std::to_string(limits.max_metadata_bytes));
  }
  if (header.payload_length > limits.max_payload_bytes) {
    return fail(errc::resource_exhausted,
                "frame: payload of " + std::to_string(header.payload_length) +
                    " bytes exceeds the limit of " + std::to_string(limits.max_payload_bytes));
  }
  return header;
}

std::vector<std::byte> encode_frame(MessageType type, std::string_view metadata,
                                    std::span<const std::byte> payload) {
  const FrameLimits defaults;
  FEDCORE_ASSERT(metadata.size() <= defaults.max_metadata_bytes &&
                     payload.size() <= defaults.max_payload_bytes,
                 "encode_frame: lengths above the default limits");
  const FrameHeader header{type, static_cast<std::uint32_t>(metadata.size()), 0, payload.size()};
  const auto head = encode_header(header);
  std::vector<std::byte> out;
  out.reserve(kFrameHeaderSize + metadata.size() + payload.size());
  out.insert(out.end(), head.begin(), head.end());
  const auto* m = reinterpret_cast<const std::byte*>(metadata.data());
  out.insert(out.end(), m, m + metadata.size());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

result<Frame> decode_frame(std::span<const std::byte> bytes, const FrameLimits& limits) {
  if (bytes.size() < kFrameHeaderSize) {
    return fail(errc::out_of_range,
                "frame: " + std::to_string(bytes.size()) + " bytes end inside the 24-byte header");
  }
  auto header = decode_header(bytes.first<kFrameHeaderSize>(), limits);
  if (!header) {
    return header.error();
  }
  const std::uint64_t total =
      kFrameHeaderSize + std::uint64_t{header->metadata_length} + header->payload_length;
  if (bytes.size() < total) {
    return fail(errc::out_of_range, "frame: truncated, " + std::to_string(bytes.size()) + " of " +
                                        std::to_string(total) + " bytes");
  }
  if (bytes.size() > total) {
    return fail(errc::invalid_argument,
                "frame: " + std::to_string(bytes.size() - total) + " bytes after the frame");
  }
  Frame frame;
  frame.type = header->type;
  frame.metadata.assign(reinterpret_cast<const char*>(bytes.data()) + kFrameHeaderSize,
                        header->metadata_length);
  const auto payload = bytes.subspan(kFrameHeaderSize + header->metadata_length);
  frame.payload.assign(payload.begin(), payload.end());
  return frame;
}

result<std::span<const float>> payload_floats(std::span<const std::byte> payload) {
  if (payload.size() % sizeof(float) != 0) {
    return fail(errc::invalid_argument, "payload of " + std::to_string(payload.size()) +
                                            " bytes is not a whole number of float32 values");
  }
  if (reinterpret_cast<std::uintptr_t>(payload.data()) % alignof(float) != 0) {
    return fail(errc::invalid_argument, "payload is not 4-byte aligned");
  }
  return std::span<const float>(reinterpret_cast<const float*>(payload.data()),
                                payload.size() / sizeof(float));
}

result<std::span<const std::uint32_t>> payload_words(std::span<const std::byte> payload) {
  auto floats = payload_floats(payload);
  if (!floats) {
    return floats.error();
  }
  return std::span<const std::uint32_t>(reinterpret_cast<const std::uint32_t*>(payload.data()),
                                        payload.size() / sizeof(std::uint32_t));
}

}  // namespace fedcore::protocol
