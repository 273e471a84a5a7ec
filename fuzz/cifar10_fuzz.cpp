// The CIFAR-10 binary loader (shared/data/cifar10.hpp): 3073-byte records (a label byte,
// 3072 pixel bytes), read through the real path-based loader.
#include <cstddef>
#include <cstdint>

#include "fuzz/support/fuzz_support.hpp"
#include "shared/data/cifar10.hpp"

using namespace fedcore;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzz::MemFile file(fuzz::as_bytes(data, size));
  (void)data::load_cifar10_batches({file.path()});
  return 0;
}
