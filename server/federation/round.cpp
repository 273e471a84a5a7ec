#include "server/federation/round.hpp"

#include <algorithm>
#include <cmath>

#include "shared/util/assert.hpp"

namespace fedcore::federation {

std::string_view client_status_name(ClientStatus status) noexcept {
  switch (status) {
    case ClientStatus::ok:
      return "ok";
    case ClientStatus::rejected:
      return "rejected";
    case ClientStatus::timeout:
      return "timeout";
    case ClientStatus::dropped:
      return "dropped";
    case ClientStatus::late:
      return "late";
  }
  return "unknown";
}

Round::Round(RoundSettings settings, std::map<std::string, std::string> nonces,
             std::span<const float> global, const model::ParamLayout& layout, Strategy& strategy,
             RoundTimer* timer)
    : settings_(std::move(settings)),
      nonces_(std::move(nonces)),
      global_(global),
      layout_(layout),
      strategy_(strategy),
      timer_(timer) {
  for (const auto& [id, nonce] : nonces_) {
    ClientOutcome outcome;
    outcome.client_id = id;
    outcome.reason = "no update before the deadline";
    outcomes_.push_back(std::move(outcome));
  }
  has_answered_.assign(outcomes_.size(), false);
}

ClientOutcome* Round::find(std::string_view client_id) {
  for (auto& o : outcomes_) {
    if (o.client_id == client_id) {
      return &o;
    }
  }
  return nullptr;
}

bool Round::is_selected(std::string_view client_id) const {
  return nonces_.find(std::string(client_id)) != nonces_.end();
}

bool Round::has_answered(std::string_view client_id) const {
  for (std::size_t i = 0; i < outcomes_.size(); ++i) {
    if (outcomes_[i].client_id == client_id) {
      return has_answered_[i];
    }
  }
  return false;
}

std::string_view stale_reason_name(StaleReason reason) noexcept {
  switch (reason) {
    case StaleReason::replay:
      return "replay";
    case StaleReason::not_selected:
      return "not_selected";
    case StaleReason::nonce:
      return "nonce";
    case StaleReason::duplicate:
      return "duplicate";
    case StaleReason::no_round:
      return "no_round";
  }
  return "unknown";
}

UpdateVerdict Round::on_update(std::string_view client_id, const protocol::UpdateReport& report,
                               std::span<const float> params, std::uint64_t bytes_up,
                               std::string* why, StaleReason* stale_reason,
                               std::span<const float> control, const protocol::StepDecoder* step) {
  auto set_why = [&](std::string text) {
    if (why != nullptr) {
      *why = std::move(text);
    }
  };
  auto stale = [&](StaleReason reason, std::string text) {
    set_why(std::move(text));
    if (stale_reason != nullptr) {
      *stale_reason = reason;
    }
    return UpdateVerdict::stale;
  };
  // Binding first: an update for another run, round or nonce proves nothing about this
  // round and must not consume the client's one answer.
  if (report.run_id != settings_.run_id || report.round != settings_.round) {
    return stale(StaleReason::replay, "stale or replayed update for run " +
                                          std::to_string(report.run_id) + " round " +
                                          std::to_string(report.round) + "; current is run " +
                                          std::to_string(settings_.run_id) + " round " +
                                          std::to_string(settings_.round));
  }
  const auto nonce = nonces_.find(std::string(client_id));
  if (nonce == nonces_.end()) {
    return stale(StaleReason::not_selected,
                 "client '" + std::string(client_id) + "' was not selected for this round");
  }
  if (report.nonce != nonce->second) {
    return stale(StaleReason::nonce,
                 "nonce does not match the one issued to this client for this round (replay?)");
  }
  ClientOutcome* outcome = find(client_id);
  FEDCORE_ASSERT(outcome != nullptr, "selected client without an outcome");
  const auto index = static_cast<std::size_t>(outcome - outcomes_.data());
  if (has_answered_[index]) {
    return stale(StaleReason::duplicate,
                 "duplicate update: this client already answered this round");
  }
  has_answered_[index] = true;
  ++answered_;
  outcome->samples = report.samples;
  outcome->loss = report.loss;
  outcome->accuracy = report.accuracy;
  outcome->train_seconds = report.train_seconds;
  outcome->bytes_up = bytes_up;
  outcome->evaluation = report.evaluation;
  const auto cap = settings_.max_samples_per_client;
  const auto drawn = settings_.weights.find(std::string(client_id));
  const auto weight = drawn != settings_.weights.end() ? drawn->second
                      : cap > 0                        ? std::min(report.samples, cap)
                                                       : report.samples;
  if (auto mismatch = control_mismatch(control)) {
    outcome->status = ClientStatus::rejected;
    outcome->reason = std::move(*mismatch);
    outcome->rejection = Rejection::control;
    set_why(outcome->reason);
    return UpdateVerdict::rejected;
  }
  const auto declared = settings_.declared_samples.find(std::string(client_id));
  const bool above_declared =
      declared != settings_.declared_samples.end() && report.samples > declared->second;
  // The common case, an update every cheap check passes, is read once: folded while its
  // distance is measured, and taken back if that distance is not allowed (the fused path,
  // aggregate.hpp). Anything else goes the long way, so every refusal names the first
  // failing check in validate_update's order.
  const std::size_t value_count = step != nullptr ? step->size() : params.size();
  const bool cheap_checks_pass = !above_declared && value_count == layout_.total() &&
                                 report.samples >= 1 &&
                                 report.samples <= settings_.checks.max_samples &&
                                 report.layout_fingerprint == layout_.fingerprint_hex();
  if (cheap_checks_pass) {
    const auto folding = timer_ != nullptr ? timer_->now() : Clock::steady_time{};
    // An encoded update is decoded a chunk at a time as it is folded: no parameter vector
    // of its own (protocol::StepDecoder).
    const UpdateChunks chunks = [&](std::size_t begin, std::span<float> out) {
      step->decode_range(begin, global_.subspan(begin, out.size()), out);
    };
    const auto squared = step != nullptr ? strategy_.add_update_measured(chunks, weight)
                                         : strategy_.add_update_measured(params, weight);
    if (timer_ != nullptr) {
      timer_->add(&store::RoundPhases::aggregate_ms, folding);
    }
    if (squared && distance_allowed(*squared, settings_.checks)) {
      return accept(*outcome, control);
    }
    if (squared) {
      if (step != nullptr) {
        strategy_.remove_update(chunks, weight);
      } else {
        strategy_.remove_update(params, weight);
      }
    }
  }
  // The long way needs the update whole: an encoded one is decoded here (the strategies
  // that keep every update, and the rejections, which name the first failing check).
  std::vector<float> decoded;
  if (step != nullptr) {
    if (step->size() == global_.size()) {
      decoded.resize(step->size());
      step->decode_range(0, global_, decoded);
    }
    params = decoded;
  }
  const auto checking = timer_ != nullptr ? timer_->now() : Clock::steady_time{};
  auto refused = validate_update(params, report.layout_fingerprint, report.samples, global_,
                                 layout_, settings_.checks);
  if (timer_ != nullptr) {
    timer_->add(&store::RoundPhases::validate_ms, checking);
  }
  if (refused) {
    outcome->status = ClientStatus::rejected;
    outcome->reason = std::move(refused->message);
    outcome->rejection = refused->reason;
    set_why(outcome->reason);
    return UpdateVerdict::rejected;
  }
  // The weight is the client's word: bound it by its own declaration and the admin's cap.
  if (above_declared) {
    outcome->status = ClientStatus::rejected;
    outcome->reason = "update claims " + std::to_string(report.samples) +
                      " samples; the client declared " + std::to_string(declared->second) +
                      " at HELLO";
    outcome->rejection = Rejection::samples_above_declared;
    set_why(outcome->reason);
    return UpdateVerdict::rejected;
  }
  const auto folding = timer_ != nullptr ? timer_->now() : Clock::steady_time{};
  strategy_.add_update(params, weight);
  if (timer_ != nullptr) {
    timer_->add(&store::RoundPhases::aggregate_ms, folding);
  }
  return accept(*outcome, control);
}

UpdateVerdict Round::accept(ClientOutcome& outcome, std::span<const float> control) {
  outcome.status = ClientStatus::ok;
  outcome.reason.clear();
  ++accepted_;
  if (strategy_.wants_control()) {
    strategy_.add_control(control);
  }
  return UpdateVerdict::accepted;
}

std::optional<std::string> Round::control_mismatch(std::span<const float> control) const {
  if (!strategy_.wants_control()) {
    if (control.empty()) {
      return std::nullopt;
    }
    return "the update carries a control variate (" + std::to_string(control.size()) +
           " values), which strategy " + std::string(strategy_.name()) + " does not use";
  }
  if (control.size() != layout_.total()) {
    return "strategy " + std::string(strategy_.name()) +
           " needs the change of the site's control variate with the update, one value per "
           "parameter (" +
           std::to_string(layout_.total()) + "); the update carries " +
           std::to_string(control.size());
  }
  for (std::size_t i = 0; i < control.size(); ++i) {
    if (!std::isfinite(control[i])) {
      return "the change of the site's control variate is not finite at index " + std::to_string(i);
    }
  }
  return std::nullopt;
}

void Round::on_dropped(std::string_view client_id, std::string reason) {
  ClientOutcome* outcome = find(client_id);
  if (outcome == nullptr) {
    return;
  }
  const auto index = static_cast<std::size_t>(outcome - outcomes_.data());
  if (has_answered_[index]) {
    return;
  }
  has_answered_[index] = true;
  ++answered_;
  outcome->status = ClientStatus::dropped;
  outcome->reason = std::move(reason);
}

void Round::on_secure_contribution(std::string_view client_id, std::uint64_t bytes_up,
                                   std::uint64_t extra_bytes_down) {
  ClientOutcome* outcome = find(client_id);
  if (outcome == nullptr) {
    return;
  }
  const auto index = static_cast<std::size_t>(outcome - outcomes_.data());
  if (!has_answered_[index]) {
    has_answered_[index] = true;
    ++answered_;
  }
  outcome->status = ClientStatus::ok;
  outcome->reason = "secure aggregation: part of the masked sum";
  outcome->bytes_up = bytes_up;
  outcome->bytes_down += extra_bytes_down;
  ++accepted_;
}

const std::string* Round::nonce_of(std::string_view client_id) const {
  const auto it = nonces_.find(std::string(client_id));
  return it == nonces_.end() ? nullptr : &it->second;
}

void Round::set_bytes_down(std::string_view client_id, std::uint64_t bytes) {
  if (ClientOutcome* outcome = find(client_id)) {
    outcome->bytes_down = bytes;
  }
}

RoundClose Round::close() {
  RoundClose summary;
  if (target_reached()) {
    for (std::size_t i = 0; i < outcomes_.size(); ++i) {
      if (!has_answered_[i]) {
        outcomes_[i].status = ClientStatus::late;
        outcomes_[i].reason = "late: the round closed with its " +
                              std::to_string(settings_.target_updates) +
                              " updates before this client answered (over-selection)";
      }
    }
  }
  for (const auto& o : outcomes_) {
    switch (o.status) {
      case ClientStatus::ok:
        ++summary.accepted;
        break;
      case ClientStatus::rejected:
        ++summary.rejected;
        break;
      case ClientStatus::timeout:
        ++summary.timed_out;
        break;
      case ClientStatus::dropped:
        ++summary.dropped;
        break;
      case ClientStatus::late:
        ++summary.late;
        break;
    }
  }
  summary.succeeded = summary.accepted >= std::max<std::size_t>(settings_.min_clients, 1);
  if (!summary.succeeded) {
    summary.failure_reason = "no quorum: " + std::to_string(summary.accepted) +
                             " accepted update(s), " + std::to_string(settings_.min_clients) +
                             " required (" + std::to_string(summary.rejected) + " rejected, " +
                             std::to_string(summary.timed_out) + " timed out, " +
                             std::to_string(summary.dropped) + " dropped)";
  }
  return summary;
}

}  // namespace fedcore::federation
