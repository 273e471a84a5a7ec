// The IDX loader (shared/data/idx.hpp): MNIST / Fashion-MNIST image and label files, raw
// or gzip, as a site supplies them. The first input byte picks images (even) or labels
// (odd); the rest is the file, read through the real path-based reader (and zlib).
#include <cstddef>
#include <cstdint>

#include "fuzz/support/fuzz_support.hpp"
#include "shared/data/idx.hpp"

using namespace fedcore;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  const fuzz::MemFile file(fuzz::as_bytes(data + 1, size - 1));
  if (data[0] % 2 == 0) {
    (void)data::read_idx_images(file.path());
  } else {
    (void)data::read_idx_labels(file.path());
  }
  return 0;
}
