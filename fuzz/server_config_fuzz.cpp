// The server's config file (server/api/config.hpp): federation listener, TLS paths,
// limits, the API and its token hashes. Strict: an operator's typo must be an error that
// names the key, never a crash or a silently different server.
#include <cstddef>
#include <cstdint>

#include "fuzz/support/fuzz_support.hpp"
#include "server/api/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)fedcore::api::parse_server_config_text(fedcore::fuzz::as_text(data, size));
  return 0;
}
