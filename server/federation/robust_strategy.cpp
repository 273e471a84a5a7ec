#include "server/federation/robust_strategy.hpp"

#include <array>
#include <cmath>
#include <sstream>
#include <utility>

#include "server/federation/robust_aggregation.hpp"
#include "server/federation/update_buffer.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::federation {
namespace {

enum class Rule { median, trimmed_mean, krum, multi_krum, bulyan, centered_clipping };

constexpr std::array<std::pair<std::string_view, Rule>, 6> kRules{{
    {"median", Rule::median},
    {"trimmed_mean", Rule::trimmed_mean},
    {"krum", Rule::krum},
    {"multi_krum", Rule::multi_krum},
    {"bulyan", Rule::bulyan},
    {"centered_clipping", Rule::centered_clipping},
}};

// A bound on f and m far above any federation that keeps 4f + 3 and m + f clear of overflow.
constexpr std::size_t kMaxCount = std::size_t{1} << 32;
// More iterations buy nothing the paper measured (it uses 1 to 3), and each one is two
// passes over every update.
constexpr std::size_t kMaxClippingIterations = 100;

std::optional<Rule> rule_named(std::string_view name) noexcept {
  for (const auto& [known, rule] : kRules) {
    if (name == known) {
      return rule;
    }
  }
  return std::nullopt;
}

// Doubles as people write them ("0.1", not "0.100000").
std::string number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string count(std::size_t value) {
  return std::to_string(value);
}

// Only the options config.name reads: an unused option cannot be wrong.
std::optional<std::string> option_error(const StrategyConfig& config) {
  if (config.byzantine > kMaxCount) {
    return config.name + "'s byzantine = " + count(config.byzantine) + " is above 2^32";
  }
  if (config.krum_selected > kMaxCount) {
    return config.name + "'s krum_selected = " + count(config.krum_selected) + " is above 2^32";
  }
  if (config.name == "trimmed_mean" && !(config.trim_fraction >= 0 && config.trim_fraction < 0.5)) {
    return "trimmed_mean needs trim_fraction in [0, 0.5); it is " + number(config.trim_fraction);
  }
  if (config.name == "centered_clipping") {
    if (!(std::isfinite(config.clipping_radius) && config.clipping_radius > 0)) {
      return "centered_clipping needs a finite clipping_radius above 0; it is " +
             number(config.clipping_radius);
    }
    if (config.clipping_iterations == 0 || config.clipping_iterations > kMaxClippingIterations) {
      return "centered_clipping needs clipping_iterations from 1 to " +
             count(kMaxClippingIterations) + "; it is " + count(config.clipping_iterations);
    }
  }
  if (config.name == "centered_clipping" && config.clipping_center != "model" &&
      config.clipping_center != "previous_step") {
    return "centered_clipping needs clipping_center \"model\" or \"previous_step\"; it is \"" +
           config.clipping_center + "\"";
  }
  if (config.name == "krum" && config.krum_selected > 0) {
    return "krum selects exactly one update, so krum_selected = " + count(config.krum_selected) +
           " does not apply (multi_krum averages krum_selected updates)";
  }
  return std::nullopt;
}

// The rules of check_robust_config for n updates; `counted` ends the message
// ("clients_per_round is 7", "the round received 7").
std::optional<std::string> count_error(const StrategyConfig& config, std::size_t n,
                                       const std::string& counted) {
  const std::size_t f = config.byzantine;
  const bool krum_family = config.name == "krum" || config.name == "multi_krum";
  if (krum_family && n <= 2 * f + 2) {
    return config.name + " with byzantine = " + count(f) +
           " needs more than 2f + 2 = " + count(2 * f + 2) + " updates per round; " + counted;
  }
  const std::size_t m = config.krum_selected;
  if (config.name == "multi_krum" && m > 0 && n < m + f) {
    return "multi_krum with krum_selected = " + count(m) + " and byzantine = " + count(f) +
           " needs at least m + f = " + count(m + f) + " updates per round (m <= n - f); " +
           counted;
  }
  if (config.name == "bulyan" && n < 4 * f + 3) {
    return "bulyan with byzantine = " + count(f) + " needs at least 4f + 3 = " + count(4 * f + 3) +
           " updates per round; " + counted;
  }
  if (config.name == "trimmed_mean") {
    const auto trim = static_cast<std::size_t>(std::floor(config.trim_fraction * double(n)));
    if (n < 2 * trim + 1) {
      return "trimmed_mean with trim_fraction = " + number(config.trim_fraction) +
             " keeps n - 2 floor(beta n) = " + count(n - std::min(n, 2 * trim)) +
             " updates per coordinate and needs at least 1; " + counted;
    }
  }
  if (n == 0) {
    return config.name + " needs at least 1 update per round; " + counted;
  }
  return std::nullopt;
}

std::string received(std::size_t n) {
  return "the round received " + count(n);
}

// Where centered clipping centres its clipping (StrategyConfig::clipping_center): the round's
// model, or the model moved by the previous round's aggregate step. Karimireddy et al. centre
// on the workers' momentum; a federation's sites send models, not momenta, so the server
// keeps the history itself: honest steps of consecutive rounds point the same way, and an
// attacker's reversed step lies about twice its length from that centre instead of one,
// so it is clipped harder. The previous step is the strategy's state (ServerState
// "previous_step"), saved with each checkpoint.
class ClippingCenter {
 public:
  ClippingCenter(const StrategyConfig& config, std::size_t param_count)
      : history_(config.clipping_center == "previous_step") {
    if (history_) {
      auto initial = std::make_shared<ServerState>();
      initial->strategy = config.name;
      initial->names = {"previous_step"};
      initial->values.assign(param_count, 0.0f);
      state_ = std::move(initial);
    }
  }

  // The centre of this round; valid until the next begin().
  std::span<const float> begin(std::span<const float> global) {
    global_ = global;
    if (!history_) {
      return global;
    }
    center_.resize(global.size());
    for (std::size_t i = 0; i < global.size(); ++i) {
      center_[i] = global[i] + state_->values[i];
    }
    return center_;
  }

  // Records the round's aggregate step (next - global) as the next round's history.
  void finished(std::span<const float> next) {
    if (!history_) {
      return;
    }
    auto state = std::make_shared<ServerState>();
    state->strategy = state_->strategy;
    state->steps = state_->steps + 1;
    state->names = state_->names;
    state->values.resize(next.size());
    for (std::size_t i = 0; i < next.size(); ++i) {
      state->values[i] = next[i] - global_[i];
    }
    state_ = std::move(state);
  }

  std::shared_ptr<const ServerState> state() const { return history_ ? state_ : nullptr; }

  result<void> restore(const ServerState& saved) {
    if (!history_) {
      return fail(errc::invalid_argument, "centered_clipping centred on the model keeps no state");
    }
    if (saved.strategy != state_->strategy || saved.names != state_->names ||
        saved.values.size() != state_->values.size() || saved.steps < 0) {
      return fail(errc::invalid_argument, "the saved state is not a centered_clipping history of " +
                                              count(state_->values.size()) + " parameters");
    }
    for (float v : saved.values) {
      if (!std::isfinite(v)) {
        return fail(errc::invalid_argument, "the saved centered_clipping history is not finite");
      }
    }
    state_ = std::make_shared<const ServerState>(saved);
    return {};
  }

 private:
  bool history_;
  std::span<const float> global_;
  std::vector<float> center_;
  std::shared_ptr<const ServerState> state_;
};

// Every rule but single-iteration centered clipping: the round's updates are copied into a
// buffer as they come and aggregated at the end.
class BufferedRobustStrategy final : public Strategy {
 public:
  BufferedRobustStrategy(Rule rule, StrategyConfig config, std::size_t param_count)
      : rule_(rule),
        config_(std::move(config)),
        buffer_(param_count, config_.memory_budget_bytes, config_.scratch_dir),
        center_(config_, param_count) {}

  std::string_view name() const noexcept override { return config_.name; }

  void begin_round(std::span<const float> global, std::uint64_t /*max_total_weight*/) override {
    buffer_.clear();
    clip_center_ = center_.begin(global);
    received_ = 0;
    add_error_.reset();
  }

  // After a failed copy the round cannot finish (refuse_finish), so later updates are only
  // counted: copying them would spend the time and the disk for nothing.
  void add_update(std::span<const float> update, std::uint64_t /*samples*/) override {
    ++received_;
    if (add_error_) {
      return;
    }
    if (auto added = buffer_.add(update); !added) {
      add_error_ = config_.name + " could not keep update " + count(received_) +
                   " of the round: " + added.error().to_string();
    }
  }

  std::size_t updates() const noexcept override { return received_; }

  std::optional<std::string> refuse_finish() const override {
    if (add_error_) {
      return add_error_;
    }
    return count_error(config_, received_, received(received_));
  }

  std::vector<float> finish_round() override {
    FEDCORE_ASSERT(!refuse_finish(), "robust strategy: finish_round on a refused round");
    std::vector<float> next(buffer_.dim());
    aggregate(next);
    buffer_.clear();
    if (rule_ == Rule::centered_clipping) {
      center_.finished(next);
    }
    return next;
  }

  std::shared_ptr<const ServerState> state() const override { return center_.state(); }
  result<void> restore(const ServerState& saved) override { return center_.restore(saved); }

 private:
  void aggregate(std::span<float> out) const {
    const std::size_t f = config_.byzantine;
    switch (rule_) {
      case Rule::median:
        return coordinate_median(buffer_, out);
      case Rule::trimmed_mean:
        return trimmed_mean(buffer_, config_.trim_fraction, out);
      case Rule::krum:
        return mean_of_rows(buffer_, krum_select(buffer_, f, 1), out);
      case Rule::multi_krum: {
        const std::size_t m = config_.krum_selected > 0 ? config_.krum_selected : received_ - f;
        return mean_of_rows(buffer_, krum_select(buffer_, f, m), out);
      }
      case Rule::bulyan:
        return bulyan(buffer_, f, out);
      case Rule::centered_clipping:
        return centered_clipping(buffer_, clip_center_, config_.clipping_radius,
                                 config_.clipping_iterations, out);
    }
  }

  Rule rule_;
  StrategyConfig config_;
  UpdateBuffer buffer_;
  ClippingCenter center_;  // used by centered_clipping only
  std::span<const float> clip_center_;
  std::size_t received_ = 0;
  std::optional<std::string> add_error_;
};

// Centered clipping with one iteration needs each update only once, for its clipped term
// around the round's model: nothing is buffered, and nothing can fail on the way.
class StreamingClipping final : public Strategy {
 public:
  StreamingClipping(StrategyConfig config, std::size_t param_count)
      : config_(std::move(config)), center_(config_, param_count) {}

  std::string_view name() const noexcept override { return config_.name; }
  void begin_round(std::span<const float> global, std::uint64_t /*max_total_weight*/) override {
    sum_.begin(center_.begin(global), config_.clipping_radius);
    dim_ = global.size();
  }
  void add_update(std::span<const float> update, std::uint64_t /*samples*/) override {
    sum_.add(update);
  }
  std::size_t updates() const noexcept override { return sum_.count(); }
  std::optional<std::string> refuse_finish() const override {
    return count_error(config_, sum_.count(), received(sum_.count()));
  }
  std::vector<float> finish_round() override {
    std::vector<float> next(dim_);
    sum_.finish(next);
    center_.finished(next);
    return next;
  }
  std::shared_ptr<const ServerState> state() const override { return center_.state(); }
  result<void> restore(const ServerState& saved) override { return center_.restore(saved); }

 private:
  StrategyConfig config_;
  ClippingCenter center_;
  ClippedStepSum sum_;
  std::size_t dim_ = 0;
};

}  // namespace

bool is_robust_strategy(std::string_view name) noexcept {
  return rule_named(name).has_value();
}

result<std::unique_ptr<Strategy>> make_robust_strategy(const StrategyConfig& config,
                                                       std::size_t param_count) {
  const auto rule = rule_named(config.name);
  if (!rule) {
    return fail(errc::invalid_argument,
                "unknown robust strategy '" + config.name +
                    "' (robust: median, trimmed_mean, krum, multi_krum, bulyan, "
                    "centered_clipping)");
  }
  if (auto bad = option_error(config)) {
    return fail(errc::invalid_argument, *bad);
  }
  if (*rule == Rule::centered_clipping && config.clipping_iterations == 1) {
    return std::unique_ptr<Strategy>(std::make_unique<StreamingClipping>(config, param_count));
  }
  return std::unique_ptr<Strategy>(
      std::make_unique<BufferedRobustStrategy>(*rule, config, param_count));
}

std::optional<std::string> check_robust_config(const StrategyConfig& config,
                                               std::size_t clients_per_round) {
  if (!is_robust_strategy(config.name)) {
    return std::nullopt;
  }
  if (auto bad = option_error(config)) {
    return bad;
  }
  return count_error(config, clients_per_round, "clients_per_round is " + count(clients_per_round));
}

}  // namespace fedcore::federation
