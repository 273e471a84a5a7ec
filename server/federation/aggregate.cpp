#include "server/federation/aggregate.hpp"

#include <cmath>

#include "server/federation/fixed_point_mean.hpp"
#include "server/federation/robust_strategy.hpp"
#include "server/federation/scaffold.hpp"
#include "server/federation/server_optimizer.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::federation {
namespace {

std::string tensor_at(const model::ParamLayout& layout, std::size_t index) {
  for (const auto& e : layout.entries()) {
    if (index >= e.offset && index < e.offset + e.size) {
      return e.name + "[" + std::to_string(index - e.offset) + "]";
    }
  }
  return "[" + std::to_string(index) + "]";
}

class FedAvg final : public Strategy {
 public:
  explicit FedAvg(std::size_t n) : average_(n) {}
  std::string_view name() const noexcept override { return "fedavg"; }
  void begin_round(std::span<const float> global, std::uint64_t max_total_weight) override {
    average_.begin(global, max_total_weight);
  }
  void add_update(std::span<const float> update, std::uint64_t samples) override {
    average_.add(update, samples);
  }
  std::optional<double> add_update_measured(std::span<const float> update,
                                            std::uint64_t samples) override {
    return average_.add_measured(update, samples);
  }
  void remove_update(std::span<const float> update, std::uint64_t samples) override {
    average_.remove(update, samples);
  }
  std::optional<double> add_update_measured(const UpdateChunks& update,
                                            std::uint64_t samples) override {
    return average_.add_measured(update, samples);
  }
  void remove_update(const UpdateChunks& update, std::uint64_t samples) override {
    average_.remove(update, samples);
  }
  void use_workers(WorkerPool* workers) noexcept override { average_.use_workers(workers); }
  std::size_t updates() const noexcept override { return average_.count(); }
  std::vector<float> finish_round() override {
    auto next = average_.mean();
    average_.clear();
    return next;
  }

 private:
  FixedPointMean average_;
};

// Σ (x - g)^2 exactly as the fused fold measures it (FixedPointMean::squared_distance: fixed
// chunks, 8 lane sums each, a fixed order), so validating first and folding after
// (validate_update) and the fused path (add_update_measured) take the same decisions.
double squared_distance(std::span<const float> x, std::span<const float> g) noexcept {
  return FixedPointMean::squared_distance(x, g);
}

}  // namespace

std::string_view rejection_name(Rejection reason) noexcept {
  switch (reason) {
    case Rejection::layout:
      return "layout";
    case Rejection::shape:
      return "shape";
    case Rejection::non_finite:
      return "non_finite";
    case Rejection::samples:
      return "samples";
    case Rejection::samples_above_declared:
      return "samples_above_declared";
    case Rejection::norm:
      return "norm";
    case Rejection::control:
      return "control";
  }
  return "unknown";
}

double update_distance(std::span<const float> update, std::span<const float> global) {
  FEDCORE_ASSERT(update.size() == global.size(), "update_distance: sizes differ");
  return std::sqrt(squared_distance(update, global));
}

bool distance_allowed(double squared, const UpdateChecks& checks) noexcept {
  if (!std::isfinite(squared)) {
    return false;
  }
  const double norm = std::sqrt(squared);
  return !(checks.max_update_norm > 0 && norm > checks.max_update_norm) &&
         norm <= FixedPointMean::kMaxDistance;
}

std::optional<RejectedUpdate> validate_update(std::span<const float> update,
                                              std::string_view claimed_fingerprint,
                                              std::uint64_t samples, std::span<const float> global,
                                              const model::ParamLayout& layout,
                                              const UpdateChecks& checks) {
  if (claimed_fingerprint != layout.fingerprint_hex()) {
    return RejectedUpdate{Rejection::layout, "update layout " + std::string(claimed_fingerprint) +
                                                 " differs from the global model's " +
                                                 layout.fingerprint_hex()};
  }
  if (update.size() != layout.total()) {
    return RejectedUpdate{Rejection::shape, "update has " + std::to_string(update.size()) +
                                                " values, the model has " +
                                                std::to_string(layout.total())};
  }
  FEDCORE_ASSERT(global.size() == layout.total(),
                 "validate_update: global differs from the layout");
  // One branch-free pass: a non-finite value makes the sum non-finite, and a sum of finite
  // floats' squared differences cannot overflow a double (< 2^256 per term). Only then
  // is the update searched for the value to name.
  const double squared = squared_distance(update, global);
  if (!std::isfinite(squared)) {
    for (std::size_t i = 0; i < update.size(); ++i) {
      if (!std::isfinite(update[i])) {
        return RejectedUpdate{Rejection::non_finite,
                              std::string("update value ") + tensor_at(layout, i) + " is " +
                                  (std::isnan(update[i]) ? "NaN" : "infinite")};
      }
    }
    FEDCORE_ASSERT(false, "validate_update: a non-finite distance from finite values");
  }
  if (samples == 0 || samples > checks.max_samples) {
    return RejectedUpdate{Rejection::samples, "update claims " + std::to_string(samples) +
                                                  " samples; allowed 1 to " +
                                                  std::to_string(checks.max_samples)};
  }
  if (distance_allowed(squared, checks)) {
    return std::nullopt;
  }
  const double norm = std::sqrt(squared);
  if (checks.max_update_norm > 0 && norm > checks.max_update_norm) {
    return RejectedUpdate{Rejection::norm, "update moves the model by L2 norm " +
                                               std::to_string(norm) + ", above the bound " +
                                               std::to_string(checks.max_update_norm)};
  }
  // Whatever the run's own bound: the exact sum's range is planned for this distance
  // (fixed_point_mean.hpp), and no training step moves a model this far.
  if (!(norm <= FixedPointMean::kMaxDistance)) {
    return RejectedUpdate{Rejection::norm, "update moves the model by L2 norm " +
                                               std::to_string(norm) +
                                               ", above the aggregation's limit " +
                                               std::to_string(FixedPointMean::kMaxDistance)};
  }
  return std::nullopt;
}

result<void> Strategy::restore(const ServerState& saved) {
  return fail(errc::invalid_argument, "strategy " + std::string(name()) +
                                          " keeps no state between rounds; the saved state is " +
                                          saved.strategy + "'s");
}

result<std::unique_ptr<Strategy>> make_strategy(std::string_view name, std::size_t param_count) {
  if (name == "fedavg" || name == "fedprox") {
    return std::unique_ptr<Strategy>(std::make_unique<FedAvg>(param_count));
  }
  return fail(errc::invalid_argument,
              "unknown strategy '" + std::string(name) + "' (known: fedavg, fedprox)");
}

result<std::unique_ptr<Strategy>> make_strategy(const StrategyConfig& config,
                                                std::size_t param_count) {
  if (auto kind = server_optimizer_kind(config.name)) {
    return make_server_optimizer(*kind, config, param_count);
  }
  if (config.name == "fedavg" || config.name == "fedprox") {
    return make_strategy(std::string_view(config.name), param_count);
  }
  if (is_robust_strategy(config.name)) {
    return make_robust_strategy(config, param_count);
  }
  if (config.name == "scaffold") {
    return make_scaffold(config, param_count);
  }
  std::string known;
  for (const auto name : kStrategies) {
    known += (known.empty() ? "" : ", ") + std::string(name);
  }
  return fail(errc::invalid_argument,
              "unknown strategy '" + config.name + "' (known: " + known + ")");
}

}  // namespace fedcore::federation
