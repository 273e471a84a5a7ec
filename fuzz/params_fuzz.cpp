// Parameter files (shared/model/param_io.hpp, docs/formats.md "Parameter file"): what
// load_params reads -- the server's checkpoints and the model files an operator hands to
// fedcore-train -- through decode_params, the in-memory half load_params calls after reading
// the file.
//
// Invariant checked: an accepted file re-encodes to bytes that decode to the same layout,
// parameters and metadata.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fuzz/support/fuzz_support.hpp"
#include "shared/model/param_io.hpp"

using namespace fedcore;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto bundle = model::decode_params(fuzz::as_bytes(data, size), "fuzz input");
  if (!bundle || bundle->metadata_json.size() > model::kMaxParamHeaderBytes / 2) {
    return 0;  // encode_params takes metadata up to half the header limit
  }
  const auto bytes = model::encode_params(bundle->layout, bundle->params, bundle->metadata_json);
  auto again = model::decode_params(bytes, "re-encoded");
  if (!again) {
    fuzz::invariant_failed("params", "a re-encoded file is refused: " + again.error().message);
  }
  if (again->layout.fingerprint() != bundle->layout.fingerprint() ||
      again->params.size() != bundle->params.size() ||
      std::memcmp(again->params.data(), bundle->params.data(),
                  bundle->params.size() * sizeof(float)) != 0 ||
      again->metadata_json != bundle->metadata_json) {
    fuzz::invariant_failed("params", "a re-encoded file decodes differently");
  }
  return 0;
}
