// The federation's metadata parsers (shared/protocol/messages.hpp): every JSON object a
// client or the server sends in a frame's metadata. The first input byte picks the parser,
// the rest is the metadata text, so one corpus covers all of them.
//
// Invariant checked: what a parser accepts, to_metadata writes back in a form the same
// parser accepts (the server stores and resends these messages).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/support/fuzz_support.hpp"
#include "shared/protocol/messages.hpp"
#include "shared/protocol/metadata.hpp"

namespace {

using namespace fedcore;

template <class Parse>
void round_trip(std::string_view name, Parse parse, std::string_view text) {
  auto parsed = parse(text);
  if (!parsed) {
    return;
  }
  const auto written = protocol::to_metadata(*parsed);
  if (!parse(written)) {
    fuzz::invariant_failed(name, "to_metadata wrote what the parser refuses: " + written);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  const auto text = fuzz::as_text(data + 1, size - 1);
  switch (data[0] % 10) {
    case 0:
      round_trip("hello", protocol::parse_hello, text);
      break;
    case 1:
      round_trip("welcome", protocol::parse_welcome, text);
      break;
    case 2:
      round_trip("train", protocol::parse_train_request, text);
      break;
    case 3:
      round_trip("update", protocol::parse_update_report, text);
      break;
    case 4:
      round_trip("feature_stats_request", protocol::parse_feature_stats_request, text);
      break;
    case 5:
      round_trip("feature_stats", protocol::parse_feature_stats_report, text);
      break;
    case 6:
      round_trip("error", protocol::parse_error_message, text);
      break;
    case 8:
      round_trip("evaluate", protocol::parse_evaluate_request, text);
      break;
    case 9:
      round_trip("evaluation", protocol::parse_evaluation_report, text);
      break;
    default:  // 7
      (void)protocol::parse_metadata(text);
      break;
  }
  return 0;
}
