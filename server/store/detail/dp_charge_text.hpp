// The rounds.dp_charge column's text (docs/schema.md): a DpCharge as JSON,
// {"z": 1.1, "shapes": [[q, steps], ...], "clip": 0.8} ("clip" only with adaptive clipping).
// Doubles are written so they read back as the same double.
#pragma once

#include <string>

#include "server/store/records.hpp"
#include "shared/util/error.hpp"

namespace fedcore::store::detail {

std::string dp_charge_text(const DpCharge& charge);
// Errors: data_loss when the text is not a charge this store wrote.
result<DpCharge> parse_dp_charge(const std::string& text);

}  // namespace fedcore::store::detail
