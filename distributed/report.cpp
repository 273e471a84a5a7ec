#include "distributed/report.hpp"

#include <algorithm>
#include <cstdio>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "distributed/train_support.hpp"
#include "shared/model/param_io.hpp"

namespace fedcore::distributed {

nlohmann::json curve_json(const std::vector<EpochPoint>& curve) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : curve) {
    out.push_back({{"epoch", p.epoch},
                   {"train_seconds", p.train_seconds},
                   {"train_loss", p.train_loss},
                   {"test_accuracy", p.test_accuracy},
                   {"test_loss", p.test_loss}});
  }
  return out;
}

nlohmann::json run_report(const TrainResult& r, const std::string& transport,
                          const TrainOptions& o) {
  nlohmann::json ranks = nlohmann::json::array();
  bool identical = true;
  for (const auto& s : r.ranks) {
    identical = identical && s.param_crc32 == r.ranks.front().param_crc32;
    std::vector<int> cpus;
    for (int cpu = 0; cpu < kMaskedCpus; ++cpu) {
      if ((s.cpu_mask >> cpu) & 1)
        cpus.push_back(cpu);
    }
    ranks.push_back({{"rank", s.rank},
                     {"wall_seconds", s.wall_seconds},
                     {"cpu_seconds", s.cpu_seconds},
                     {"comm_seconds", s.comm_seconds},
                     {"comm_share", s.wall_seconds > 0 ? s.comm_seconds / s.wall_seconds : 0.0},
                     {"peak_rss_mb", s.peak_rss_mb},
                     {"samples", s.samples},
                     {"param_crc32", s.param_crc32},
                     {"cpus", cpus},
                     {"shared_memory_bytes_sent", s.shared_memory_bytes}});
  }
  const char* mode = r.async == AsyncMode::parameter_server ? "ps-asgd"
                     : o.easgd_alpha > 0                    ? "easgd"
                                                            : "ddp";
  nlohmann::json report = {
      {"mode", mode},
      {"world", r.world},
      {"transport", transport},
      {"model", o.spec},
      {"local_batch", o.batch_size},
      {"global_batch", o.batch_size * r.world},
      {"epochs", o.epochs},
      {"start_step", r.start_step},
      {"steps", r.steps},
      {"samples", r.samples},
      {"wall_seconds", r.wall_seconds},
      {"samples_per_second", r.samples_per_second},
      {"test_accuracy", r.test_accuracy},
      {"test_loss", r.test_loss},
      {"final_train_loss", r.final_train_loss},
      {"curve", curve_json(r.curve)},
      {"seconds_per_step",
       r.steps > r.start_step ? r.wall_seconds / double(r.steps - r.start_step) : 0.0},
      {"augmentation",
       {{"crop_padding", o.augmentation.crop_padding},
        {"horizontal_flip", o.augmentation.horizontal_flip}}},
      {"params_identical_on_all_ranks", identical},
      {"bucket_bytes", o.reducer.bucket_bytes},
      {"overlap", o.reducer.overlap},
      {"ranks", ranks}};
  if (o.adaptive.enabled || o.test_slow_rank >= 0) {
    nlohmann::json splits = nlohmann::json::array();
    for (const auto& c : r.splits)
      splits.push_back({{"after_step", c.step}, {"local_batches", c.split}});
    report["adaptive_batch"] = {{"enabled", o.adaptive.enabled},
                                {"period", o.adaptive.period},
                                {"min_local_batch", o.adaptive.min_local_batch},
                                {"splits", splits}};
    if (o.test_slow_rank >= 0)
      report["test_slowdown"] = {{"rank", o.test_slow_rank}, {"factor", o.test_slowdown}};
  }
  if (r.async == AsyncMode::parameter_server) {
    // One update is one worker's local batch: the global batch of synchronous training
    // does not exist here.
    report["global_batch"] = o.batch_size;
    report["parameter_server"] = {
        {"workers", r.ps.workers},
        {"updates", r.ps.updates},
        {"gradients_received", r.ps.received},
        {"discarded_stale", r.ps.discarded},
        {"unused_at_stop", r.ps.unused_at_stop},
        {"mean_staleness", r.ps.mean_staleness},
        {"max_staleness", r.ps.max_staleness},
        {"staleness_histogram", r.ps.staleness_histogram},
        {"max_staleness_allowed", o.max_staleness == kUnboundedStaleness
                                      ? nlohmann::json(nullptr)
                                      : nlohmann::json(o.max_staleness)},
        {"staleness_lr", o.staleness_lr == StalenessLr::inverse ? "inverse" : "constant"}};
  }
  return report;
}

nlohmann::json scaling_report(const std::vector<nlohmann::json>& runs) {
  std::vector<nlohmann::json> sorted = runs;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a["world"].template get<int>() < b["world"].template get<int>();
  });
  nlohmann::json out = nlohmann::json::array();
  if (sorted.empty())
    return {{"runs", out}};
  const auto& base = sorted.front();
  const double base_rate = base["samples_per_second"].get<double>();
  // Pipeline runs have no test accuracy: -1 there.
  const double base_acc = base.value("test_accuracy", -1.0);
  const int base_world = base["world"].get<int>();
  for (const auto& run : sorted) {
    const int world = run["world"].get<int>();
    const double rate = run["samples_per_second"].get<double>();
    const double speedup = base_rate > 0 ? rate / base_rate : 0;
    double comm_share = 0;
    for (const auto& rank : run["ranks"])
      comm_share = std::max(comm_share, rank["comm_share"].get<double>());
    out.push_back({{"world", world},
                   {"samples_per_second", rate},
                   {"speedup", speedup},
                   {"efficiency", speedup * base_world / world},
                   {"test_accuracy", run.value("test_accuracy", -1.0)},
                   {"accuracy_delta_vs_baseline", run.value("test_accuracy", -1.0) - base_acc},
                   {"max_comm_share", comm_share},
                   {"run", run}});
  }
  return {{"baseline_world", base_world}, {"runs", out}};
}

std::string scaling_svg(const nlohmann::json& scaling) {
  const auto& runs = scaling["runs"];
  const int width = 640, height = 360, left = 70, bottom = 60, top = 40;
  double max_rate = 1;
  for (const auto& r : runs) {
    const double ideal = runs.front()["samples_per_second"].get<double>() * r["world"].get<int>() /
                         runs.front()["world"].get<int>();
    max_rate = std::max({max_rate, r["samples_per_second"].get<double>(), ideal});
  }
  const double plot_h = height - bottom - top;
  const double slot = runs.empty() ? 1.0 : double(width - left - 20) / runs.size();
  std::string svg;
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif' "
      "font-size='12'>\n<text x='%d' y='20' font-size='14'>fedcore-dist data-parallel "
      "throughput (samples/s); grey = ideal linear scaling</text>\n",
      width, height, left);
  svg += buf;
  std::snprintf(buf, sizeof buf, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='black'/>\n", left,
                height - bottom, width - 10, height - bottom);
  svg += buf;
  std::size_t i = 0;
  for (const auto& r : runs) {
    const double rate = r["samples_per_second"].get<double>();
    const double ideal = runs.front()["samples_per_second"].get<double>() * r["world"].get<int>() /
                         runs.front()["world"].get<int>();
    const double x = left + slot * i + slot * 0.2;
    const double w = slot * 0.3;
    const double hi = plot_h * ideal / max_rate, hr = plot_h * rate / max_rate;
    std::snprintf(buf, sizeof buf,
                  "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='#bbbbbb'/>\n"
                  "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='#3366cc'/>\n"
                  "<text x='%.1f' y='%.1f'>%.0f/s</text>\n"
                  "<text x='%.1f' y='%d'>%d worker(s)</text>\n"
                  "<text x='%.1f' y='%d'>speedup %.2fx, eff. %.0f%%, comm %.0f%%</text>\n",
                  x, height - bottom - hi, w, hi, x + w, height - bottom - hr, w, hr, x + w,
                  height - bottom - hr - 4, rate, x, height - bottom + 16, r["world"].get<int>(), x,
                  height - bottom + 32, r["speedup"].get<double>(),
                  100 * r["efficiency"].get<double>(), 100 * r["max_comm_share"].get<double>());
    svg += buf;
    ++i;
  }
  svg += "</svg>\n";
  return svg;
}

result<void> write_text(const std::string& path, const std::string& text) {
  return model::write_file_atomically(
      path, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

}  // namespace fedcore::distributed
