#include "client/dp_ledger.hpp"

#include <algorithm>
#include <cstdio>

#include "shared/model/dp_sgd.hpp"
#include "shared/privacy/rdp_accountant.hpp"

namespace fedcore::client {

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
  return epsilon_of(runs_[run], delta);
}

result<double> RecordDpLedger::spent(std::int64_t run, double delta) const {
  const auto it = runs_.find(run);
  if (it == runs_.end()) {
    return 0.0;
  }
  return epsilon_of(it->second, delta);
}

}  // namespace fedcore::client
