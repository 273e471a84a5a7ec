// fedcore-dist checkpoints (distributed/checkpoint.hpp): model and optimizer state that a
// resumed job reads back from disk, through decode_checkpoint, the in-memory half of
// load_checkpoint.
#include <cstddef>
#include <cstdint>

#include "distributed/checkpoint.hpp"
#include "fuzz/support/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)fedcore::distributed::decode_checkpoint(fedcore::fuzz::as_bytes(data, size), "fuzz input");
  return 0;
}
