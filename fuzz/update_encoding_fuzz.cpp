// Compressed update payloads (shared/protocol/update_encoding.hpp, docs/protocol.md
// "Compressed updates"): what the server decodes from any selected client's UPDATE when the
// run compresses.
//
// Input: byte 0 selects the encoding (f16, int8, topk by its value mod 3), bytes 1-2 the
// model's size (1..4096 parameters), the rest is the payload. The global model is a fixed
// ramp, so the decoded parameters are global + step.
//
// Invariants checked: an accepted payload gives exactly one finite value per parameter, and
// a top-k payload changes at most the k parameters it announces.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/support/fuzz_support.hpp"
#include "shared/protocol/update_encoding.hpp"

using namespace fedcore;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) {
    return 0;
  }
  const protocol::UpdateEncoding encodings[] = {protocol::UpdateEncoding::f16,
                                                protocol::UpdateEncoding::int8,
                                                protocol::UpdateEncoding::topk};
  const auto encoding = encodings[data[0] % 3];
  const std::size_t n = 1 + (static_cast<std::size_t>(data[1]) << 8 | data[2]) % 4096;
  std::vector<float> global(n);
  for (std::size_t i = 0; i < n; ++i) {
    global[i] = static_cast<float>(i) * 0.25f - 100.0f;
  }
  std::vector<float> params;
  const auto payload = fuzz::as_bytes(data + 3, size - 3);
  if (!protocol::decode_step(encoding, payload, global, params)) {
    return 0;
  }
  if (params.size() != n) {
    fuzz::invariant_failed("update_encoding", "an accepted payload decodes to another size");
  }
  std::size_t changed = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(params[i])) {
      fuzz::invariant_failed("update_encoding",
                             "an accepted payload decodes to a non-finite value");
    }
    changed += params[i] != global[i] ? 1 : 0;
  }
  if (encoding == protocol::UpdateEncoding::topk) {
    std::uint32_t k = 0;
    std::memcpy(&k, payload.data(), sizeof k);
    if (changed > k) {
      fuzz::invariant_failed("update_encoding", "a top-k payload changed more than k parameters");
    }
  }
  return 0;
}
