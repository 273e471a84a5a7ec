// What a closed round leaves in the history: its row and one result per selected client,
// with sample-weighted training and federated-evaluation means over accepted updates.
#pragma once

#include <vector>

#include "server/federation/round.hpp"
#include "server/store/records.hpp"

namespace fedcore::federation {

struct RoundReport {
  store::RoundRecord record;
  std::vector<store::ClientResult> results;
};

// Fills run, round, times, counts, bytes and the weighted means; the caller adds the
// failure reason or the server-side evaluation.
RoundReport make_round_report(const Round& round, const RoundClose& closed, std::int64_t started_ms,
                              std::int64_t finished_ms);

}  // namespace fedcore::federation
