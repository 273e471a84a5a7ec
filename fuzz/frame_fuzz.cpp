// Frame codec (shared/protocol/frame.hpp): the first bytes any peer sends, before TLS
// identity means anything to the session. decode_header is what FrameChannel runs on every
// 24-byte header; decode_frame the whole-buffer form.
//
// Invariants checked: an accepted header respects the limits it was checked against and
// re-encodes to the same 24 bytes; an accepted frame re-encodes to exactly the input.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fuzz/support/fuzz_support.hpp"
#include "shared/protocol/frame.hpp"

namespace {

using namespace fedcore;
using fedcore::fuzz::as_bytes;
using fedcore::fuzz::invariant_failed;

void check_header(std::span<const std::byte, protocol::kFrameHeaderSize> head,
                  const protocol::FrameLimits& limits) {
  auto header = protocol::decode_header(head, limits);
  if (!header) {
    return;
  }
  if (header->metadata_length > limits.max_metadata_bytes ||
      header->payload_length > limits.max_payload_bytes) {
    invariant_failed("frame", "decode_header accepted a length above its limit");
  }
  const auto again = protocol::encode_header(*header);
  if (!std::equal(again.begin(), again.end(), head.begin())) {
    invariant_failed("frame", "an accepted header does not re-encode to its bytes");
  }
  (void)protocol::message_type_name(header->type);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = as_bytes(data, size);
  if (bytes.size() >= protocol::kFrameHeaderSize) {
    const auto head = bytes.first<protocol::kFrameHeaderSize>();
    check_header(head, {});
    // The small limits a session applies before HELLO (issue 19).
    check_header(head, {.max_metadata_bytes = 4096, .max_payload_bytes = 0});
  }

  auto frame = protocol::decode_frame(bytes);
  if (!frame) {
    return 0;
  }
  const auto again = protocol::encode_frame(frame->type, frame->metadata, frame->payload);
  if (!std::equal(again.begin(), again.end(), bytes.begin(), bytes.end())) {
    invariant_failed("frame", "an accepted frame does not re-encode to its bytes");
  }
  (void)protocol::payload_floats(frame->payload);
  (void)protocol::payload_words(frame->payload);
  return 0;
}
