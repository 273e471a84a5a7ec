// GET /metrics: the Prometheus text exposition format (version 0.0.4), with the metric
// names of docs/api.md.
//
// Gauges and round counters are computed from the server and the store at scrape time
// (so they survive restarts); update counters count the events seen since this process
// started (Prometheus handles counter resets). Reasons become a small fixed set of
// label values (reason_label), never free text, so the series count stays bounded.
//
// Thread safety: none (io_context thread).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/store/records.hpp"

namespace fedcore::api {

// The bucket upper bounds of fedcore_round_duration_seconds.
inline constexpr double kRoundDurationBuckets[] = {0.1, 0.25, 0.5, 1,   2.5, 5,
                                                   10,  30,   60,  120, 300, 600};

struct MetricsSnapshot {
  std::int64_t clients_online = 0;
  std::map<std::string, std::int64_t> runs_by_state;  // every state name, zeros included
  std::int64_t rounds_committed = 0;
  std::int64_t rounds_failed = 0;
  std::vector<double> round_durations_s;  // committed rounds
  store::RoundPhaseTotals phases;         // every recorded attempt, added up
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  double uptime_s = 0;
  // The kind code of the run held for its storage ("disk_full", "read_only", "io_error"),
  // empty when none; and its failed probes so far.
  std::string storage_fault;
  std::int64_t storage_failed_probes = 0;
};

// The label value for a rejection or staleness reason text of the federation server, for
// events that carry no reason_code (stored by older versions): one of layout, shape,
// non_finite, samples, norm (rejections), replay, not_selected, nonce, duplicate, no_round
// (stale), malformed, other.
std::string_view reason_label(std::string_view reason);

class UpdateCounters {
 public:
  // Counts update_accepted / update_rejected / update_stale events; ignores others. A
  // refusal's reason is its detail.reason_code, else reason_label(detail.reason).
  void on_event(const store::EventRecord& event);
  // (result, reason) -> count; reason is "" for accepted updates.
  const std::map<std::pair<std::string, std::string>, std::uint64_t>& counts() const noexcept {
    return counts_;
  }

 private:
  std::map<std::pair<std::string, std::string>, std::uint64_t> counts_;
};

std::string render_metrics(const MetricsSnapshot& snapshot, const UpdateCounters& updates);

}  // namespace fedcore::api
