#include "server/federation/evaluation_round.hpp"

#include <algorithm>

namespace fedcore::federation {

EvaluationRound::EvaluationRound(std::int64_t run_id, std::int64_t round,
                                 std::map<std::string, std::string> asked,
                                 const std::vector<std::string>& offline,
                                 std::uint64_t max_samples_per_client)
    : run_id_(run_id),
      round_(round),
      asked_(std::move(asked)),
      max_samples_per_client_(max_samples_per_client) {
  for (const auto& id : offline) {
    store::ClientEvaluation row;
    row.client_id = id;
    row.status = store::EvaluationStatus::offline;
    row.message = "not connected when the evaluation was asked";
    rows_.emplace(id, std::move(row));
  }
}

void EvaluationRound::not_asked(const std::string& client_id, const std::string& why) {
  if (is_asked(client_id) || rows_.count(client_id) != 0) {
    return;
  }
  store::ClientEvaluation row;
  row.client_id = client_id;
  row.status = store::EvaluationStatus::failed;
  row.message = why;
  rows_.emplace(client_id, std::move(row));
}

bool EvaluationRound::is_asked(const std::string& client_id) const {
  return asked_.count(client_id) != 0;
}

bool EvaluationRound::has_answered(const std::string& client_id) const {
  return is_asked(client_id) && rows_.count(client_id) != 0;
}

bool EvaluationRound::on_report(const std::string& client_id,
                                const protocol::EvaluationReport& report, std::string* why) {
  auto stale = [&](std::string text) {
    if (why != nullptr) {
      *why = std::move(text);
    }
    return false;
  };
  // Binding first, as for updates: a stale answer must not use up the client's real one.
  if (report.run_id != run_id_ || report.round != round_) {
    return stale("an evaluation for run " + std::to_string(report.run_id) + " round " +
                 std::to_string(report.round) + "; the evaluation in progress is of run " +
                 std::to_string(run_id_) + " round " + std::to_string(round_));
  }
  const auto nonce = asked_.find(client_id);
  if (nonce == asked_.end()) {
    return stale("client '" + client_id + "' was not asked to evaluate this round");
  }
  if (report.nonce != nonce->second) {
    return stale("nonce does not match the one issued to this client for this evaluation");
  }
  if (rows_.count(client_id) != 0) {
    return stale("this client already answered this evaluation");
  }
  store::ClientEvaluation row;
  row.client_id = client_id;
  switch (report.status) {
    case protocol::EvaluationStatus::ok:
      row.status = store::EvaluationStatus::ok;
      row.loss = report.loss;
      row.accuracy = report.accuracy;
      row.samples = static_cast<std::int64_t>(report.samples);
      break;
    case protocol::EvaluationStatus::refused:
      row.status = store::EvaluationStatus::refused;
      row.message = report.message;
      break;
    case protocol::EvaluationStatus::failed:
      row.status = store::EvaluationStatus::failed;
      row.message = report.message;
      break;
  }
  rows_.emplace(client_id, std::move(row));
  ++answered_;
  return true;
}

void EvaluationRound::on_dropped(const std::string& client_id, const std::string& reason,
                                 store::EvaluationStatus status) {
  if (!is_asked(client_id) || rows_.count(client_id) != 0) {
    return;
  }
  store::ClientEvaluation row;
  row.client_id = client_id;
  row.status = status;
  row.message = reason;
  rows_.emplace(client_id, std::move(row));
  ++answered_;
}

std::vector<store::ClientEvaluation> EvaluationRound::close() {
  for (const auto& [id, nonce] : asked_) {
    if (rows_.count(id) == 0) {
      store::ClientEvaluation row;
      row.client_id = id;
      row.status = store::EvaluationStatus::timeout;
      row.message = "no answer before the evaluation deadline";
      rows_.emplace(id, std::move(row));
    }
  }
  answered_ = asked_.size();
  std::vector<store::ClientEvaluation> out;
  out.reserve(rows_.size());
  for (const auto& [id, row] : rows_) {
    out.push_back(row);  // the map keeps them sorted by id
  }
  return out;
}

std::optional<EvaluationMean> EvaluationRound::mean() const {
  EvaluationMean m;
  double weight = 0, loss = 0, accuracy = 0;
  for (const auto& [id, row] : rows_) {
    if (row.status != store::EvaluationStatus::ok || !row.loss || !row.accuracy) {
      continue;
    }
    auto samples = static_cast<std::uint64_t>(row.samples);
    if (max_samples_per_client_ > 0) {
      samples = std::min(samples, max_samples_per_client_);
    }
    const double w = double(samples);
    weight += w;
    loss += w * *row.loss;
    accuracy += w * *row.accuracy;
    m.samples += samples;
    ++m.clients;
  }
  if (!(weight > 0)) {
    return std::nullopt;
  }
  m.loss = loss / weight;
  m.accuracy = accuracy / weight;
  return m;
}

}  // namespace fedcore::federation
