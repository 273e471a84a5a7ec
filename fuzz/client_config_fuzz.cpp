// The client daemon's config file (client/client_config.hpp) and its "policy" object
// (client/site_policy.hpp), the rules a site sets for what it agrees to train. The first
// input byte picks: even, the whole config file; odd, a policy object on its own (so the
// fuzzer need not rebuild a valid config around every policy it tries).
#include <cstddef>
#include <cstdint>

#include "client/client_config.hpp"
#include "client/site_policy.hpp"
#include "fuzz/support/fuzz_support.hpp"
#include "shared/util/strict_json.hpp"

using namespace fedcore;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  const auto text = fuzz::as_text(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    (void)client::parse_client_config_text(text);
    return 0;
  }
  // The client config reads its policy from text the same way (strict JSON first).
  if (auto policy = parse_json_strict(text, "client config"); policy) {
    (void)client::parse_site_policy(*policy);
  }
  return 0;
}
