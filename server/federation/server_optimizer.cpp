#include "server/federation/server_optimizer.hpp"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "server/federation/stepped_mean.hpp"

namespace fedcore::federation {
namespace {

std::string_view kind_name(ServerOptimizerKind kind) noexcept {
  switch (kind) {
    case ServerOptimizerKind::momentum:
      return "fedavgm";
    case ServerOptimizerKind::adagrad:
      return "fedadagrad";
    case ServerOptimizerKind::adam:
      return "fedadam";
    case ServerOptimizerKind::yogi:
      return "fedyogi";
  }
  return "fedavgm";
}

// The hyper-parameters a step reads, in double: the moments are kept in float (the
// model's own precision, half the memory), the arithmetic of one step is not.
struct StepRule {
  ServerOptimizerKind kind;
  double lr, momentum, beta1, beta2, tau;
};

class ServerOptimizer final : public SteppedMean {
 public:
  ServerOptimizer(ServerOptimizerKind kind, const StrategyConfig& c, std::size_t n,
                  std::unique_ptr<Strategy> mean)
      : SteppedMean(std::move(mean)), rule_{kind,    c.server_lr, c.server_momentum,
                                            c.beta1, c.beta2,     c.tau} {
    auto initial = std::make_shared<ServerState>();
    initial->strategy = std::string(kind_name(kind));
    initial->names = {"m"};
    initial->values.assign(n, 0.0f);
    if (adaptive()) {
      // v_{-1} = tau^2 (Reddi et al., Algorithm 2: v_{-1} >= tau^2).
      initial->names.push_back("v");
      initial->values.resize(2 * n, static_cast<float>(c.tau * c.tau));
    }
    n_ = n;
    state_ = std::move(initial);
  }

  std::string_view name() const noexcept override { return kind_name(rule_.kind); }
  std::vector<float> finish_round() override {
    auto next = finish_mean();
    // A new snapshot each round: the previous one may still be in the checkpoint writer's
    // hands (the round before this one commits in the background).
    auto state = std::make_shared<ServerState>();
    state->strategy = state_->strategy;
    state->steps = state_->steps + 1;
    state->names = state_->names;
    state->values.resize(state_->values.size());
    for (std::size_t i = 0; i < next.size(); ++i) {
      const double x = round_global()[i];
      const double delta = static_cast<double>(next[i]) - x;
      next[i] = static_cast<float>(x + step(i, delta, *state));
    }
    state_ = std::move(state);
    return next;
  }

  std::shared_ptr<const ServerState> state() const override { return state_; }

  result<void> restore(const ServerState& saved) override {
    if (saved.strategy != state_->strategy) {
      return fail(errc::invalid_argument,
                  "the saved state is " + saved.strategy + "'s, not " + state_->strategy + "'s");
    }
    if (saved.names != state_->names || saved.values.size() != state_->values.size() ||
        saved.steps < 0) {
      return fail(errc::invalid_argument,
                  "the saved " + saved.strategy + " state holds " +
                      std::to_string(saved.names.size()) + " vectors of " +
                      std::to_string(saved.values.size()) + " values in all, not " +
                      std::to_string(state_->names.size()) + " of " + std::to_string(n_) +
                      " (a model of " + std::to_string(n_) + " parameters)");
    }
    for (std::size_t i = 0; i < saved.values.size(); ++i) {
      // Every moment is finite, and v (the second vector) is never negative.
      if (!std::isfinite(saved.values[i]) || (i >= n_ && saved.values[i] < 0)) {
        return fail(errc::invalid_argument,
                    "the saved " + saved.strategy + " state has a non-finite or negative " +
                        saved.names[i / n_] + " at " + std::to_string(i % n_));
      }
    }
    state_ = std::make_shared<const ServerState>(saved);
    return {};
  }

 private:
  bool adaptive() const noexcept { return rule_.kind != ServerOptimizerKind::momentum; }

  // Updates parameter i's moments into `out` from state_ and returns the step to add to x.
  double step(std::size_t i, double delta, ServerState& out) const noexcept {
    const double m0 = state_->values[i];
    if (rule_.kind == ServerOptimizerKind::momentum) {
      const double m = rule_.momentum * m0 + delta;
      out.values[i] = static_cast<float>(m);
      return rule_.lr * m;
    }
    const double m = rule_.beta1 * m0 + (1 - rule_.beta1) * delta;
    const double v0 = state_->values[n_ + i];
    const double d2 = delta * delta;
    double v = v0;
    switch (rule_.kind) {
      case ServerOptimizerKind::adagrad:
        v = v0 + d2;
        break;
      case ServerOptimizerKind::adam:
        v = rule_.beta2 * v0 + (1 - rule_.beta2) * d2;
        break;
      case ServerOptimizerKind::yogi: {
        const double direction = v0 > d2 ? 1.0 : (v0 < d2 ? -1.0 : 0.0);
        v = v0 - (1 - rule_.beta2) * d2 * direction;
        break;
      }
      case ServerOptimizerKind::momentum:
        break;
    }
    out.values[i] = static_cast<float>(m);
    out.values[n_ + i] = static_cast<float>(v);
    return rule_.lr * m / (std::sqrt(v) + rule_.tau);
  }

  StepRule rule_;
  std::size_t n_ = 0;  // parameters
  std::shared_ptr<const ServerState> state_;
};

result<void> check_range(bool ok, const char* key, double value, const char* range) {
  if (ok) {
    return {};
  }
  return fail(errc::invalid_argument, std::string("strategy_options.") + key + " is " +
                                          std::to_string(value) + "; it must be in " + range);
}

}  // namespace

std::optional<ServerOptimizerKind> server_optimizer_kind(std::string_view name) noexcept {
  for (auto kind : {ServerOptimizerKind::momentum, ServerOptimizerKind::adagrad,
                    ServerOptimizerKind::adam, ServerOptimizerKind::yogi}) {
    if (kind_name(kind) == name) {
      return kind;
    }
  }
  return std::nullopt;
}

result<std::unique_ptr<Strategy>> make_server_optimizer(ServerOptimizerKind kind,
                                                        const StrategyConfig& c,
                                                        std::size_t param_count) {
  for (const auto& checked :
       {check_range(c.server_lr > 0 && c.server_lr <= 100, "server_lr", c.server_lr, "(0, 100]"),
        check_range(c.server_momentum >= 0 && c.server_momentum < 1, "server_momentum",
                    c.server_momentum, "[0, 1)"),
        check_range(c.beta1 >= 0 && c.beta1 < 1, "beta1", c.beta1, "[0, 1)"),
        check_range(c.beta2 >= 0 && c.beta2 < 1, "beta2", c.beta2, "[0, 1)"),
        check_range(c.tau > 0 && c.tau <= 1, "tau", c.tau, "(0, 1]")}) {
    if (!checked) {
      return checked.error();
    }
  }
  auto mean = make_strategy("fedavg", param_count);
  if (!mean) {
    return mean.error();
  }
  return std::unique_ptr<Strategy>(
      std::make_unique<ServerOptimizer>(kind, c, param_count, std::move(*mean)));
}

}  // namespace fedcore::federation
