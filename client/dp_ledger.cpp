#include "client/dp_ledger.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>

#include <nlohmann/json.hpp>

#include "shared/model/dp_sgd.hpp"
#include "shared/model/param_io.hpp"
#include "shared/privacy/rdp_accountant.hpp"

namespace fedcore::client {
namespace {

constexpr const char* kFormatKey = "fedcore_dp_ledger";
constexpr int kFormatVersion = 1;

}  // namespace

result<double> RecordDpLedger::epsilon_of(const std::vector<RecordDpSteps>& steps,
                                          double delta) const {
  auto accountant = privacy::RdpAccountant::create();
  if (!accountant) {
    return accountant.error();
  }
  for (const auto& s : steps) {
    if (auto ok =
            accountant->compose_poisson_gaussian(s.sampling_rate, s.noise_multiplier, s.steps);
        !ok) {
      return ok.error();
    }
  }
  auto eps = accountant->epsilon(delta);
  if (!eps) {
    return eps.error();
  }
  return eps->epsilon;
}

result<double> RecordDpLedger::epsilon_after(const protocol::TrainRequest& request) const {
  const auto& terms = request.privacy;
  // What DP-SGD will do with these terms (shared/model/dp_sgd.hpp): q = min(1, B / N),
  // round(N / B) steps per epoch.
  RecordDpSteps next;
  next.sampling_rate = std::min(
      1.0, double(request.settings.batch_size) / double(std::max<std::uint64_t>(records_, 1)));
  next.noise_multiplier = terms.noise_multiplier;
  next.steps = std::uint64_t(request.settings.epochs) *
               model::dp_sgd_steps_per_epoch(records_, request.settings.batch_size);
  auto steps =
      runs_.count(request.run_id) ? runs_.at(request.run_id) : std::vector<RecordDpSteps>{};
  steps.push_back(next);
  return epsilon_of(steps, terms.delta);
}

std::optional<std::string> RecordDpLedger::check(const protocol::TrainRequest& request) const {
  const auto& terms = request.privacy;
  if (terms.dp != protocol::DpMode::record) {
    return std::nullopt;
  }
  auto eps = epsilon_after(request);
  if (!eps) {
    return "the site's accountant cannot take the run's terms: " + eps.error().message;
  }
  // A hair of slack for the server's own calibration, which meets the budget to 1e-6.
  if (*eps > terms.epsilon * (1 + 1e-5)) {
    char words[200];
    std::snprintf(words, sizeof words,
                  "this round would bring the site's epsilon to %.4f, above the run's budget "
                  "of %.4f (delta %g)",
                  *eps, terms.epsilon, terms.delta);
    return std::string(words);
  }
  return std::nullopt;
}

result<double> RecordDpLedger::record(std::int64_t run, const RecordDpSteps& steps, double delta) {
  runs_[run].push_back(steps);
  if (auto written = write(); !written) {
    return written.error();
  }
  return epsilon_of(runs_[run], delta);
}

// The file: {"fedcore_dp_ledger": 1, "runs": [{"run": id, "rounds": [{"q", "z", "steps"}]}]}.
// Doubles are written with 17 significant digits, so a reloaded ledger composes the very
// same values.
result<void> RecordDpLedger::write() const {
  if (path_.empty()) {
    return {};
  }
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& [run, rounds] : runs_) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& r : rounds) {
      list.push_back({{"q", r.sampling_rate}, {"z", r.noise_multiplier}, {"steps", r.steps}});
    }
    runs.push_back({{"run", run}, {"rounds", std::move(list)}});
  }
  const auto text = nlohmann::json{{kFormatKey, kFormatVersion}, {"runs", std::move(runs)}}.dump(1);
  if (auto ok = model::write_file_atomically(path_, std::as_bytes(std::span(text))); !ok) {
    return fail(errc::io_error, "site DP ledger '" + path_ + "': " + ok.error().message);
  }
  return {};
}

result<void> RecordDpLedger::persist_to(std::string path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    path_ = std::move(path);
    return {};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(errc::io_error, "site DP ledger '" + path + "': cannot open it");
  }
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const auto damaged = [&](const std::string& why) {
    return fail(errc::data_loss, "site DP ledger '" + path + "': " + why +
                                     "; it is left as it is (the privacy it records is spent): "
                                     "mend it or move it away knowingly");
  };
  const auto doc = nlohmann::json::parse(text, nullptr, false);
  if (!doc.is_object() || !doc.contains(kFormatKey)) {
    return fail(errc::invalid_argument,
                "site DP ledger '" + path + "' is not a Fedcore DP ledger; move it away");
  }
  if (doc[kFormatKey] != kFormatVersion || !doc.contains("runs") || !doc["runs"].is_array()) {
    return damaged("unknown version or no \"runs\" list");
  }
  std::map<std::int64_t, std::vector<RecordDpSteps>> runs;
  for (const auto& run : doc["runs"]) {
    if (!run.is_object() || !run.contains("run") || !run["run"].is_number_integer() ||
        !run.contains("rounds") || !run["rounds"].is_array()) {
      return damaged("a run without an integer \"run\" and a \"rounds\" list");
    }
    auto& rounds = runs[run["run"].get<std::int64_t>()];
    for (const auto& r : run["rounds"]) {
      if (!r.is_object() || !r.contains("q") || !r.contains("z") || !r.contains("steps") ||
          !r["q"].is_number() || !r["z"].is_number() || !r["steps"].is_number_unsigned()) {
        return damaged("a round without numbers \"q\", \"z\" and \"steps\"");
      }
      RecordDpSteps steps;
      steps.sampling_rate = r["q"].get<double>();
      steps.noise_multiplier = r["z"].get<double>();
      steps.steps = r["steps"].get<std::uint64_t>();
      if (!(steps.sampling_rate > 0 && steps.sampling_rate <= 1) || !(steps.noise_multiplier > 0) ||
          !std::isfinite(steps.noise_multiplier)) {
        return damaged("a round with q outside (0, 1] or z not positive");
      }
      rounds.push_back(steps);
    }
  }
  runs_ = std::move(runs);
  path_ = std::move(path);
  return {};
}

result<double> RecordDpLedger::spent(std::int64_t run, double delta) const {
  const auto it = runs_.find(run);
  if (it == runs_.end()) {
    return 0.0;
  }
  return epsilon_of(it->second, delta);
}

}  // namespace fedcore::client
