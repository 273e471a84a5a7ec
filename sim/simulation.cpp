#include "sim/simulation.hpp"

#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "shared/net/listener.hpp"
#include "sim/baseline.hpp"
#include "sim/federation_run.hpp"
#include "sim/plots.hpp"
#include "sim/report.hpp"
#include "sim/sim_data.hpp"

namespace fedcore::sim {
namespace {

std::string percent(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%%", 100 * v);
  return text;
}

}  // namespace

std::uint64_t open_files_needed(std::size_t clients, Transport transport,
                                const Cluster& cluster) noexcept {
  if (transport == Transport::inproc) {
    return 256;
  }
  const auto mine = sites_of(clients, cluster.rank(), cluster.size()).count();
  const std::uint64_t served = cluster.rank() == 0 ? clients : 0;
  return mine + served + 256;
}

result<SimulationOutcome> run_simulation(const SimOptions& o, Progress& progress) {
  auto single = single_process_cluster();
  return run_simulation(o, progress, *single);
}

result<SimulationOutcome> run_simulation(const SimOptions& o, Progress& progress,
                                         Cluster& cluster) {
  const auto started = std::chrono::steady_clock::now();
  const auto mine = sites_of(o.clients, cluster.rank(), cluster.size());
  // Checked before anything starts: sites short of a socket would otherwise retry until
  // the connection deadline, minutes later.
  if (!o.baseline_only) {
    const auto needed = open_files_needed(o.clients, o.transport, cluster);
    if (const auto limit = net::raise_open_file_limit(needed); limit < needed) {
      return fail(
          errc::resource_exhausted,
          std::to_string(o.clients) + " clients need about " + std::to_string(needed) +
              " open files (two sockets each" +
              (cluster.size() > 1 ? ", the server's ends on rank 0" : std::string()) +
              "); this process may open " + std::to_string(limit) +
              " (ulimit -n): raise the limit, simulate fewer" +
              (cluster.size() > 1 ? " or use more ranks" : " or split them over ranks (--mpi)"));
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) {
    return fail(errc::io_error, "cannot create the output folder " + o.out + ": " + ec.message());
  }
  progress.note("loading " + o.dataset + " and partitioning it " + o.partition + " among " +
                std::to_string(o.clients) + " clients");
  auto data = prepare_data(o);
  if (!data) {
    return data.error();
  }

  std::optional<FederatedResult> federated;
  if (!o.baseline_only) {
    RunCallbacks callbacks;
    callbacks.note = [&](const std::string& text) { progress.note(text); };
    // rounds.csv grows round by round, so a long run that is interrupted keeps its curve.
    std::vector<RoundRow> so_far;
    callbacks.round_done = [&](const RoundRow& row) {
      progress.round(row);
      so_far.push_back(row);
      if (auto w = write_text(o.out + "/rounds.csv", rounds_csv(so_far)); !w) {
        progress.note("warning: " + w.error().message);
      }
    };
    progress.note("federation: " + std::to_string(o.rounds) + " rounds, " + o.strategy + ", " +
                  std::string(to_string(o.transport)) + " transport");
    progress.begin_rounds(o.rounds);
    auto ran = run_federation(o, *data, callbacks, cluster);
    if (!ran) {
      return ran.error();
    }
    if (cluster.rank() != 0) {
      progress.note("rank " + std::to_string(cluster.rank()) + ": the run is over, " +
                    std::to_string(mine.count()) + " sites stopped");
      return SimulationOutcome{};
    }
    federated = std::move(*ran);
  }
  std::optional<BaselineResult> baseline;
  if (o.baseline || o.baseline_only) {
    progress.begin_baseline(baseline_epochs(o));
    auto ran = run_baseline(o, data->all, [&](const EpochRow& e) { progress.baseline_epoch(e); });
    if (!ran) {
      return ran.error();
    }
    baseline = std::move(*ran);
  }

  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const std::string out = o.out;
  if (federated) {
    if (auto w = write_text(out + "/rounds.csv", rounds_csv(federated->rounds)); !w) {
      return w.error();
    }
  }
  if (baseline) {
    if (auto w = write_text(out + "/baseline.csv", baseline_csv(baseline->curve)); !w) {
      return w.error();
    }
  }
  auto plots = write_plots(out, o, &*data, federated ? &*federated : nullptr,
                           baseline ? &*baseline : nullptr);
  if (!plots) {
    return plots.error();
  }
  auto summary = summary_json(o, federated ? &*federated : nullptr, baseline ? &*baseline : nullptr,
                              wall_s, peak_rss_bytes());
  summary["files"] = {{"plots", *plots}};
  if (federated) {
    summary["files"]["rounds"] = "rounds.csv";
    summary["files"]["history"] = "history.db";
  }
  if (baseline) {
    summary["files"]["baseline"] = "baseline.csv";
  }
  SimulationOutcome outcome;
  outcome.summary_path = out + "/summary.json";
  if (auto w = write_text(outcome.summary_path, summary.dump(2) + "\n"); !w) {
    return w.error();
  }

  std::string text;
  if (federated) {
    const auto& f = summary["federated"];
    outcome.final_accuracy = f["final_accuracy"].get<double>();
    text += "federated:   final accuracy " + percent(outcome.final_accuracy) + ", best " +
            percent(f["best_accuracy"].get<double>()) + " (round " +
            std::to_string(f["best_round"].get<std::int64_t>()) + "), " +
            std::to_string(federated->rounds.size()) + " rounds " + federated->end_state;
    if (!federated->end_reason.empty()) {
      text += " (" + federated->end_reason + ")";
    }
    text += ", " + Progress::duration(federated->run_s) + "\n";
  }
  if (baseline) {
    const auto& b = summary["baseline"];
    outcome.baseline_final_accuracy = b["final_accuracy"].get<double>();
    if (!federated) {
      outcome.final_accuracy = outcome.baseline_final_accuracy;
    }
    text += "centralized: final accuracy " + percent(outcome.baseline_final_accuracy) + ", best " +
            percent(b["best_accuracy"].get<double>()) + " after " +
            std::to_string(baseline->epochs) + " epoch(s), " +
            Progress::duration(baseline->wall_s) + "\n";
  }
  text += "report: " + outcome.summary_path;
  if (federated) {
    text += ", " + out + "/rounds.csv";
  }
  text += "\nplots:  ";
  for (std::size_t i = 0; i < plots->size(); ++i) {
    text += (i ? ", " : "") + out + "/" + (*plots)[i];
  }
  text += "\n";
  if (federated) {
    text += "history (SQLite): " + federated->history_path + "\n";
  }
  progress.summary(summary, text);
  return outcome;
}

}  // namespace fedcore::sim
