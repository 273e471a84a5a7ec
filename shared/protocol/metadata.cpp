#include "shared/protocol/metadata.hpp"

namespace fedcore::protocol {

result<nlohmann::json> parse_metadata(std::string_view metadata) {
  // Without exceptions on the common path; only a broken text pays for the exception that
  // carries the byte offset.
  auto parsed = nlohmann::json::parse(metadata, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    try {
      const auto discarded = nlohmann::json::parse(metadata);
      (void)discarded;
    } catch (const nlohmann::json::parse_error& e) {
      return fail(errc::invalid_argument,
                  "metadata is not valid JSON (byte " + std::to_string(e.byte) + ")");
    } catch (const nlohmann::json::exception& e) {
      // Not only syntax: a number beyond double's range (1e999) is out_of_range 406, which
      // must not escape a parser of untrusted input either.
      return fail(errc::invalid_argument, std::string("metadata is not valid JSON: ") + e.what());
    }
    return fail(errc::invalid_argument, "metadata is not valid JSON");
  }
  if (!parsed.is_object()) {
    return fail(errc::invalid_argument, "metadata must be a JSON object");
  }
  // In place: a json converts to almost anything, so plain conversion to result<json>
  // would be ambiguous.
  return result<nlohmann::json>(boost::system::in_place_value, std::move(parsed));
}

}  // namespace fedcore::protocol
