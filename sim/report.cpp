#include "sim/report.hpp"

#include <cstdio>
#include <fstream>
#include <sys/resource.h>

#include <nlohmann/json.hpp>

namespace fedcore::sim {
namespace {

std::string fixed(double v, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, v);
  return text;
}

std::string target_key(double target) {
  return fixed(target, 2);
}

}  // namespace

std::optional<std::int64_t> rounds_to_reach(const std::vector<RoundRow>& rounds, double target) {
  for (const auto& r : rounds) {
    if (r.accuracy >= target) {
      return r.round;
    }
  }
  return std::nullopt;
}

std::optional<int> epochs_to_reach(const std::vector<EpochRow>& curve, double target) {
  for (const auto& e : curve) {
    if (e.accuracy >= target) {
      return e.epoch;
    }
  }
  return std::nullopt;
}

std::string rounds_csv(const std::vector<RoundRow>& rounds) {
  std::string out =
      "round,accuracy,loss,participants,rejected,dropped,timed_out,bytes_up,bytes_down,"
      "duration_s,train_loss,elapsed_s,epsilon,site_accuracy,clip_norm\n";
  for (const auto& r : rounds) {
    out += std::to_string(r.round) + "," + fixed(r.accuracy, 6) + "," + fixed(r.loss, 6) + "," +
           std::to_string(r.participants) + "," + std::to_string(r.rejected) + "," +
           std::to_string(r.dropped) + "," + std::to_string(r.timed_out) + "," +
           std::to_string(r.bytes_up) + "," + std::to_string(r.bytes_down) + "," +
           fixed(r.duration_s, 3) + "," + fixed(r.train_loss, 6) + "," + fixed(r.elapsed_s, 3) +
           "," + (r.epsilon ? fixed(*r.epsilon, 6) : std::string()) + "," +
           (r.fed_eval_accuracy ? fixed(*r.fed_eval_accuracy, 6) : std::string()) + "," +
           (r.clip_norm ? fixed(*r.clip_norm, 6) : std::string()) + "\n";
  }
  return out;
}

std::string baseline_csv(const std::vector<EpochRow>& curve) {
  std::string out = "epoch,accuracy,loss,train_loss,seconds\n";
  for (const auto& e : curve) {
    out += std::to_string(e.epoch) + "," + fixed(e.accuracy, 6) + "," + fixed(e.loss, 6) + "," +
           fixed(e.train_loss, 6) + "," + fixed(e.seconds, 3) + "\n";
  }
  return out;
}

nlohmann::json summary_json(const SimOptions& o, const FederatedResult* fed,
                            const BaselineResult* base, double wall_s, std::uint64_t peak_rss) {
  nlohmann::json j;
  j["config"] = to_json(o);
  j["wall_s"] = wall_s;
  j["peak_rss_mb"] = double(peak_rss) / 1e6;
  if (fed != nullptr) {
    nlohmann::json f;
    f["rounds_committed"] = fed->rounds.size();
    f["rounds_failed"] = fed->failed_rounds;
    f["end_state"] = fed->end_state;
    f["end_reason"] = fed->end_reason;
    f["setup_s"] = fed->setup_s;
    f["run_s"] = fed->run_s;
    std::int64_t up = 0, down = 0, dropped = 0, rejected = 0;
    double best = 0, round_s = 0;
    std::int64_t best_round = 0;
    for (const auto& r : fed->rounds) {
      up += r.bytes_up;
      down += r.bytes_down;
      dropped += r.dropped;
      rejected += r.rejected;
      round_s += r.duration_s;
      if (r.accuracy > best) {
        best = r.accuracy;
        best_round = r.round;
      }
    }
    f["bytes_up"] = up;
    f["bytes_down"] = down;
    f["dropped"] = dropped;
    f["rejected"] = rejected;
    f["mean_round_s"] = fed->rounds.empty() ? 0.0 : round_s / double(fed->rounds.size());
    f["final_accuracy"] = fed->rounds.empty() ? 0.0 : fed->rounds.back().accuracy;
    // The sites' own test splits (federated evaluation; with FedBN, their own BatchNorm).
    if (!fed->rounds.empty() && fed->rounds.back().fed_eval_accuracy) {
      f["final_site_accuracy"] = *fed->rounds.back().fed_eval_accuracy;
    }
    f["final_loss"] = fed->rounds.empty() ? 0.0 : fed->rounds.back().loss;
    f["best_accuracy"] = best;
    f["best_round"] = best_round;
    nlohmann::json reach = nlohmann::json::object();
    for (double t : o.targets) {
      const auto n = rounds_to_reach(fed->rounds, t);
      reach[target_key(t)] = n ? nlohmann::json(*n) : nlohmann::json(nullptr);
    }
    f["rounds_to_target"] = reach;
    f["faults"] = {{"drops_injected", fed->faults.drops}, {"slow_injected", fed->faults.slow}};
    f["history"] = fed->history_path;
    j["federated"] = f;
  }
  if (base != nullptr) {
    nlohmann::json b;
    b["epochs"] = base->epochs;
    b["threads"] = base->threads;
    b["wall_s"] = base->wall_s;
    double best = 0;
    for (const auto& e : base->curve) {
      best = std::max(best, e.accuracy);
    }
    b["final_accuracy"] = base->curve.empty() ? 0.0 : base->curve.back().accuracy;
    b["best_accuracy"] = best;
    nlohmann::json reach = nlohmann::json::object();
    for (double t : o.targets) {
      const auto n = epochs_to_reach(base->curve, t);
      reach[target_key(t)] = n ? nlohmann::json(*n) : nlohmann::json(nullptr);
    }
    b["epochs_to_target"] = reach;
    j["baseline"] = b;
  }
  return j;
}

result<void> write_text(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file) {
    return fail(errc::io_error, "cannot write " + path);
  }
  return {};
}

std::uint64_t peak_rss_bytes() noexcept {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) {
    return 0;
  }
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace fedcore::sim
