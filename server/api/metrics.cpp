#include "server/api/metrics.hpp"

#include <array>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace fedcore::api {
namespace {

std::string number(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

// A code the server made: short lower_snake text, safe as a label value as it is.
bool is_label_value(const std::string& code) {
  if (code.empty() || code.size() > 32) {
    return false;
  }
  for (char c : code) {
    if (!((c >= 'a' && c <= 'z') || c == '_')) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string_view reason_label(std::string_view reason) {
  // For events stored before reason codes existed. Ordered: the first keyword found
  // decides. The phrases are those of server/federation/aggregate.cpp and round.cpp.
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 13> kKeywords{{
      {"stale or replayed", "replay"},
      {"not selected", "not_selected"},
      {"nonce", "nonce"},
      {"duplicate", "duplicate"},
      {"no round in progress", "no_round"},
      {"is NaN", "non_finite"},
      {"is infinite", "non_finite"},
      {"finite", "non_finite"},
      {"layout", "layout"},
      {"norm", "norm"},
      {"samples", "samples"},
      {"values", "shape"},
      {"malformed", "malformed"},
  }};
  for (const auto& [keyword, label] : kKeywords) {
    if (reason.find(keyword) != std::string_view::npos) {
      return label;
    }
  }
  return "other";
}

void UpdateCounters::on_event(const store::EventRecord& e) {
  std::string result;
  if (e.kind == "update_accepted") {
    result = "accepted";
  } else if (e.kind == "update_rejected") {
    result = "rejected";
  } else if (e.kind == "update_stale") {
    result = "stale";
  } else {
    return;
  }
  std::string reason;
  if (result != "accepted") {
    auto detail = nlohmann::json::parse(e.detail_json, nullptr, false);
    auto text = [&](const char* key) {
      return !detail.is_discarded() && detail.is_object() && detail.contains(key) &&
                     detail[key].is_string()
                 ? detail[key].get<std::string>()
                 : std::string();
    };
    // Events carry the server's own code (rejection_name in server/federation/aggregate.hpp,
    // stale_reason_name in server/federation/round.hpp); events stored by versions before
    // the codes existed are told apart by their reason text.
    const auto code = text("reason_code");
    reason =
        is_label_value(code) && code != "stale" ? code : std::string(reason_label(text("reason")));
  }
  ++counts_[{result, reason}];
}

std::string render_metrics(const MetricsSnapshot& s, const UpdateCounters& updates) {
  std::string out;
  header(out, "fedcore_clients_online", "gauge", "Clients connected and past HELLO.");
  out += "fedcore_clients_online " + std::to_string(s.clients_online) + "\n";

  header(out, "fedcore_runs", "gauge", "Runs by state.");
  for (const auto& [state, n] : s.runs_by_state) {
    out += "fedcore_runs{state=\"" + state + "\"} " + std::to_string(n) + "\n";
  }

  header(out, "fedcore_rounds_total", "counter", "Round attempts by outcome.");
  out += "fedcore_rounds_total{state=\"committed\"} " + std::to_string(s.rounds_committed) + "\n";
  out += "fedcore_rounds_total{state=\"failed\"} " + std::to_string(s.rounds_failed) + "\n";

  header(out, "fedcore_updates_total", "counter",
         "Client updates by result and reason, since the server started.");
  if (updates.counts().empty()) {
    out += "fedcore_updates_total{result=\"accepted\",reason=\"\"} 0\n";
  }
  for (const auto& [key, n] : updates.counts()) {
    out += "fedcore_updates_total{result=\"" + key.first + "\",reason=\"" + key.second + "\"} " +
           std::to_string(n) + "\n";
  }

  header(out, "fedcore_bytes_received_total", "counter",
         "Bytes received by the federation listener.");
  out += "fedcore_bytes_received_total " + std::to_string(s.bytes_in) + "\n";
  header(out, "fedcore_bytes_sent_total", "counter", "Bytes sent by the federation listener.");
  out += "fedcore_bytes_sent_total " + std::to_string(s.bytes_out) + "\n";

  header(out, "fedcore_round_duration_seconds", "histogram", "Duration of committed rounds.");
  double sum = 0;
  for (double d : s.round_durations_s) {
    sum += d;
  }
  for (double bound : kRoundDurationBuckets) {
    std::size_t n = 0;
    for (double d : s.round_durations_s) {
      n += d <= bound ? 1 : 0;
    }
    out += "fedcore_round_duration_seconds_bucket{le=\"" + number(bound) + "\"} " +
           std::to_string(n) + "\n";
  }
  out += "fedcore_round_duration_seconds_bucket{le=\"+Inf\"} " +
         std::to_string(s.round_durations_s.size()) + "\n";
  out += "fedcore_round_duration_seconds_sum " + number(sum) + "\n";
  out +=
      "fedcore_round_duration_seconds_count " + std::to_string(s.round_durations_s.size()) + "\n";

  header(out, "fedcore_round_phase_seconds_total", "counter",
         "Time round attempts spent, by phase: queuing the TRAIN requests, then until the "
         "last update arrived, validating and aggregating updates, evaluating the new model "
         "on the server and on the sites, writing the checkpoint, committing; all=the whole "
         "attempt.");
  const auto& p = s.phases;
  for (const auto& [phase, seconds] :
       {std::pair{"all", p.total_s}, std::pair{"requests", p.requests_s},
        std::pair{"updates", p.updates_s}, std::pair{"validate", p.validate_s},
        std::pair{"aggregate", p.aggregate_s}, std::pair{"evaluate", p.evaluate_s},
        std::pair{"federated_evaluation", p.federated_evaluation_s},
        std::pair{"checkpoint", p.checkpoint_s}, std::pair{"commit", p.commit_s}}) {
    out += "fedcore_round_phase_seconds_total{phase=\"" + std::string(phase) + "\"} " +
           number(seconds) + "\n";
  }
  header(out, "fedcore_round_phase_rounds_total", "counter",
         "Round attempts whose phases are recorded.");
  out += "fedcore_round_phase_rounds_total " + std::to_string(p.rounds) + "\n";
  header(out, "fedcore_round_cpu_seconds_total", "counter",
         "The server process's CPU time during round attempts, by mode.");
  out += "fedcore_round_cpu_seconds_total{mode=\"user\"} " + number(p.cpu_user_s) + "\n";
  out += "fedcore_round_cpu_seconds_total{mode=\"system\"} " + number(p.cpu_system_s) + "\n";

  header(out, "fedcore_storage_fault", "gauge",
         "1 while a run waits for its storage after the disk refused a write, by kind.");
  for (std::string_view kind : {"disk_full", "read_only", "io_error"}) {
    out += "fedcore_storage_fault{kind=\"" + std::string(kind) + "\"} " +
           (s.storage_fault == kind ? "1" : "0") + "\n";
  }
  header(out, "fedcore_storage_failed_probes", "gauge",
         "Storage probes that failed since the run waiting for its storage was paused.");
  out += "fedcore_storage_failed_probes " + std::to_string(s.storage_failed_probes) + "\n";

  header(out, "fedcore_uptime_seconds", "gauge", "Seconds since the server started.");
  out += "fedcore_uptime_seconds " + number(s.uptime_s) + "\n";
  return out;
}

}  // namespace fedcore::api
