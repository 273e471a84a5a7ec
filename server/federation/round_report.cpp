#include "server/federation/round_report.hpp"

namespace fedcore::federation {
namespace {

store::ResultStatus to_store(ClientStatus s) {
  switch (s) {
    case ClientStatus::ok:
      return store::ResultStatus::ok;
    case ClientStatus::rejected:
      return store::ResultStatus::rejected;
    case ClientStatus::timeout:
      return store::ResultStatus::timeout;
    case ClientStatus::dropped:
      return store::ResultStatus::dropped;
    case ClientStatus::late:
      return store::ResultStatus::late;
  }
  return store::ResultStatus::dropped;
}

// A sample-weighted mean accumulated one client at a time.
struct WeightedMean {
  double weight = 0;
  double sum = 0;
  void add(double value, double w) {
    weight += w;
    sum += w * value;
  }
  std::optional<double> value() const {
    return weight > 0 ? std::optional(sum / weight) : std::nullopt;
  }
};

}  // namespace

RoundReport make_round_report(const Round& round, const RoundClose& closed, std::int64_t started_ms,
                              std::int64_t finished_ms) {
  RoundReport report;
  auto& record = report.record;
  record.run_id = round.settings().run_id;
  record.round = round.settings().round;
  record.started_ms = started_ms;
  record.finished_ms = finished_ms;
  record.selected = static_cast<std::int64_t>(round.outcomes().size());
  record.accepted = static_cast<std::int64_t>(closed.accepted);
  record.rejected = static_cast<std::int64_t>(closed.rejected);
  record.timed_out = static_cast<std::int64_t>(closed.timed_out);
  record.dropped = static_cast<std::int64_t>(closed.dropped);
  record.late = static_cast<std::int64_t>(closed.late);
  WeightedMean train_loss, train_accuracy, eval_loss, eval_accuracy;
  for (const auto& o : round.outcomes()) {
    store::ClientResult r;
    r.client_id = o.client_id;
    r.status = to_store(o.status);
    r.reason = o.reason;
    r.samples = static_cast<std::int64_t>(o.samples);
    r.loss = o.loss;
    r.accuracy = o.accuracy;
    r.duration_s = o.train_seconds;
    r.bytes_up = static_cast<std::int64_t>(o.bytes_up);
    r.bytes_down = static_cast<std::int64_t>(o.bytes_down);
    record.bytes_up += r.bytes_up;
    record.bytes_down += r.bytes_down;
    if (o.status == ClientStatus::ok) {
      train_loss.add(o.loss, double(o.samples));
      train_accuracy.add(o.accuracy, double(o.samples));
      if (o.evaluation) {
        r.eval_loss = o.evaluation->loss;
        r.eval_accuracy = o.evaluation->accuracy;
        r.eval_samples = static_cast<std::int64_t>(o.evaluation->samples);
        eval_loss.add(o.evaluation->loss, double(o.evaluation->samples));
        eval_accuracy.add(o.evaluation->accuracy, double(o.evaluation->samples));
      }
    }
    report.results.push_back(std::move(r));
  }
  if (auto mean = train_loss.value()) {
    record.train_loss = *mean;
    record.train_accuracy = *train_accuracy.value();
  }
  if (auto mean = eval_loss.value()) {
    record.fed_eval_loss = *mean;
    record.fed_eval_accuracy = *eval_accuracy.value();
  }
  return report;
}

}  // namespace fedcore::federation
