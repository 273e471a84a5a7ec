// Run configs (server/federation/run_config.hpp): the body of POST /api/v1/runs and the
// form the store keeps and re-reads when a run resumes after a restart. Parsed strictly:
// every input must give a config or invalid_argument / resource_exhausted, never a throw.
//
// Invariant checked: the canonical text of an accepted config (to_json_text, what the
// store keeps) parses again, or a stored run could never resume.
#include <cstddef>
#include <cstdint>

#include "fuzz/support/fuzz_support.hpp"
#include "server/federation/run_config.hpp"

using namespace fedcore;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto config = federation::parse_run_config(fuzz::as_text(data, size));
  if (!config) {
    return 0;
  }
  const auto stored = federation::to_json_text(*config);
  if (auto again = federation::parse_run_config(stored); !again) {
    fuzz::invariant_failed(
        "run_config", "the stored form is refused: " + again.error().message + " in " + stored);
  }
  return 0;
}
