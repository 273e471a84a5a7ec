#include "server/federation/scaffold.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "server/federation/stepped_mean.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::federation {
namespace {

class Scaffold final : public SteppedMean {
 public:
  Scaffold(double server_lr, std::size_t n, std::unique_ptr<Strategy> mean)
      : SteppedMean(std::move(mean)), server_lr_(server_lr), n_(n) {
    auto initial = std::make_shared<ServerState>();
    initial->strategy = "scaffold";
    initial->names = {"c"};
    initial->values.assign(n, 0.0f);  // c_0 = 0, as every site's c_i starts
    state_ = std::move(initial);
  }

  std::string_view name() const noexcept override { return "scaffold"; }
  void begin_round(std::span<const float> global, std::uint64_t max_total_weight) override {
    SteppedMean::begin_round(global, max_total_weight);
    control_sum_.assign(n_, 0.0);
    controls_ = 0;
  }
  void expect_population(std::size_t eligible) override { population_ = eligible; }
  bool wants_control() const noexcept override { return true; }
  std::span<const float> control() const noexcept override { return state_->values; }
  void add_control(std::span<const float> delta) override {
    FEDCORE_ASSERT(delta.size() == n_, "scaffold: control delta of the wrong size");
    for (std::size_t i = 0; i < n_; ++i) {
      control_sum_[i] += delta[i];
    }
    ++controls_;
  }
  std::vector<float> finish_round() override {
    auto next = finish_mean();
    if (server_lr_ != 1.0) {
      for (std::size_t i = 0; i < next.size(); ++i) {
        const double x = round_global()[i];
        next[i] = static_cast<float>(x + server_lr_ * (static_cast<double>(next[i]) - x));
      }
    }
    // A new snapshot each round: the previous one may still be with the checkpoint writer.
    // The divisor is at least the sites heard from: a population smaller than that (the
    // eligible set shrank after selection) must not inflate c.
    auto state = std::make_shared<ServerState>(*state_);
    state->steps += 1;
    const double divisor = static_cast<double>(std::max(population_, controls_));
    if (controls_ > 0) {
      for (std::size_t i = 0; i < n_; ++i) {
        state->values[i] = static_cast<float>(state_->values[i] + control_sum_[i] / divisor);
      }
    }
    state_ = std::move(state);
    return next;
  }

  std::shared_ptr<const ServerState> state() const override { return state_; }

  result<void> restore(const ServerState& saved) override {
    if (saved.strategy != "scaffold" || saved.names != state_->names || saved.values.size() != n_ ||
        saved.steps < 0) {
      return fail(errc::invalid_argument, "the saved state (" + saved.strategy + ", " +
                                              std::to_string(saved.values.size()) +
                                              " values) is not a scaffold control variate of " +
                                              std::to_string(n_) + " parameters");
    }
    const auto bad = std::find_if(saved.values.begin(), saved.values.end(),
                                  [](float v) { return !std::isfinite(v); });
    if (bad != saved.values.end()) {
      return fail(errc::invalid_argument, "the saved scaffold control variate is not finite at " +
                                              std::to_string(bad - saved.values.begin()));
    }
    state_ = std::make_shared<const ServerState>(saved);
    return {};
  }

 private:
  double server_lr_;
  std::size_t n_;
  std::shared_ptr<const ServerState> state_;
  std::vector<double> control_sum_;
  std::size_t controls_ = 0;
  std::size_t population_ = 0;
};

}  // namespace

result<std::unique_ptr<Strategy>> make_scaffold(const StrategyConfig& config,
                                                std::size_t param_count) {
  if (!(config.server_lr > 0 && config.server_lr <= 100)) {
    return fail(errc::invalid_argument, "strategy_options.server_lr is " +
                                            std::to_string(config.server_lr) +
                                            "; it must be in (0, 100]");
  }
  auto mean = make_strategy("fedavg", param_count);
  if (!mean) {
    return mean.error();
  }
  return std::unique_ptr<Strategy>(
      std::make_unique<Scaffold>(config.server_lr, param_count, std::move(*mean)));
}

}  // namespace fedcore::federation
