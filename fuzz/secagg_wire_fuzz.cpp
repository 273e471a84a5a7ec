// SecAgg+ message metadata (shared/secagg/wire.hpp, message types 40-48): what clients
// and the server exchange during a secure round. The first input byte picks the parser,
// the rest is the metadata text.
//
// Invariant checked: whatever a parser accepts, to_metadata writes back in a form the same
// parser accepts (the server relays parsed keys and shares to other clients).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/support/fuzz_support.hpp"
#include "shared/secagg/wire.hpp"

namespace {

using namespace fedcore;

template <class Parse>
void round_trip(std::string_view name, Parse parse, std::string_view text) {
  auto parsed = parse(text);
  if (!parsed) {
    return;
  }
  const auto written = secagg::to_metadata(parsed->envelope, parsed->body);
  if (!parse(written)) {
    fuzz::invariant_failed(name, "to_metadata wrote what the parser refuses: " + written);
  }
}

void masked_input(std::string_view text) {
  auto parsed = secagg::parse_masked_input(text);
  if (parsed && !secagg::parse_masked_input(secagg::to_metadata(*parsed))) {
    fuzz::invariant_failed("masked", "to_metadata wrote what the parser refuses");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  const auto text = fuzz::as_text(data + 1, size - 1);
  switch (data[0] % 9) {
    case 0:
      round_trip("keys", secagg::parse_advertised_keys, text);
      break;
    case 1:
      round_trip("neighbours", secagg::parse_neighbour_keys, text);
      break;
    case 2:
      round_trip("shares", secagg::parse_shares_upload, text);
      break;
    case 3:
      round_trip("relay", secagg::parse_relayed_shares, text);
      break;
    case 4:
      masked_input(text);
      break;
    case 5:
      round_trip("survivors", secagg::parse_survivor_list, text);
      break;
    case 6:
      round_trip("signed", secagg::parse_survivor_signature, text);
      break;
    case 7:
      round_trip("unmask", secagg::parse_unmask_request, text);
      break;
    default:
      round_trip("revealed", secagg::parse_unmask_response, text);
      break;
  }
  return 0;
}
