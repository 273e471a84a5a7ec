// Model specs (shared/model/spec.hpp): part of a run config and of every TRAIN a client
// receives, so both the server (from an operator) and a site (from the server) parse them.
//
// Invariant checked: an accepted spec written back as JSON parses again (the spec travels
// in that form inside TRAIN and the stored run).
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "fuzz/support/fuzz_support.hpp"
#include "shared/model/spec.hpp"

using namespace fedcore;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto spec = model::parse_model_spec(fuzz::as_text(data, size));
  if (!spec) {
    return 0;
  }
  nlohmann::json written;
  model::to_json(written, *spec);
  if (auto again = model::parse_model_spec(written); !again) {
    fuzz::invariant_failed("model_spec", "the written spec is refused: " + again.error().message +
                                             " in " + written.dump());
  }
  return 0;
}
