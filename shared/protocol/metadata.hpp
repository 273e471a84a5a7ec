// parse_metadata: a frame's metadata as JSON, parsed once by the code that handles the
// message (the frame codec and the channel only bound its length). Kept out of frame.hpp
// so that code moving frames does not include nlohmann/json.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "shared/util/error.hpp"

namespace fedcore::protocol {

// The metadata must be a JSON object. Errors: invalid_argument, "metadata is not valid
// JSON (byte N)" with the parser's byte offset, "metadata is not valid JSON: ..." for a
// number beyond double's range, or "metadata must be a JSON object". Never throws.
result<nlohmann::json> parse_metadata(std::string_view metadata);

}  // namespace fedcore::protocol
