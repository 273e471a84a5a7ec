// The CSV loader (shared/data/csv.hpp): a site's own tabular data, read by the client
// daemon at start. The first input byte picks the options (delimiter, label column) the
// site's config could give; the rest is the file, read through the real path-based loader.
#include <array>
#include <cstddef>
#include <cstdint>

#include "fuzz/support/fuzz_support.hpp"
#include "shared/data/csv.hpp"

using namespace fedcore;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  // '"' is refused as a delimiter: the fuzzer checks the refusal too.
  static constexpr std::array<char, 4> kDelimiters = {',', ';', '\t', '"'};
  data::CsvOptions options;
  options.delimiter = kDelimiters[data[0] % kDelimiters.size()];
  if (data[0] & 4) {
    options.label_column = "label";
  }
  const fuzz::MemFile file(fuzz::as_bytes(data + 1, size - 1));
  (void)data::load_csv(file.path(), options);
  return 0;
}
