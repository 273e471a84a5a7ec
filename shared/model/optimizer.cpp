#include "shared/model/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <omp.h>
#include <string>

#include <nlohmann/json.hpp>

#include "shared/model/parallel_chunks.hpp"
#include "shared/model/update_kernels.hpp"
#include "shared/util/aligned_vector.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::model {
namespace {

constexpr std::size_t kParallelMin = std::size_t{1} << 16;

// Checks a state against the one an optimizer of `kind` with buffers `names` of `size`
// values each would export, before anything is changed.
result<void> check_state(const OptimizerState& state, OptimizerKind kind,
                         std::initializer_list<const char*> names, std::size_t size) {
  const std::string self = optimizer_kind_name(kind);
  if (state.kind != kind) {
    return fail(errc::failed_precondition, std::string("optimizer state is for ") +
                                               optimizer_kind_name(state.kind) +
                                               ", but this optimizer is " + self);
  }
  if (state.steps < 0) {
    return fail(errc::invalid_argument,
                self + " optimizer state: negative step count " + std::to_string(state.steps));
  }
  if (state.buffers.size() != names.size()) {
    std::string expected;
    for (const char* n : names)
      expected += std::string(expected.empty() ? "" : ", ") + n;
    return fail(errc::failed_precondition,
                self + " optimizer state has " + std::to_string(state.buffers.size()) +
                    " buffers, this optimizer has " + std::to_string(names.size()) + " (" +
                    (expected.empty() ? "none" : expected) +
                    "); was it made with another momentum setting?");
  }
  std::size_t i = 0;
  for (const char* name : names) {
    const auto& buffer = state.buffers[i++];
    if (buffer.name != name) {
      return fail(errc::failed_precondition, self + " optimizer state: buffer '" + buffer.name +
                                                 "' where '" + name + "' was expected");
    }
    if (buffer.values.size() != size) {
      return fail(errc::failed_precondition, self + " optimizer state: buffer '" + buffer.name +
                                                 "' has " + std::to_string(buffer.values.size()) +
                                                 " values, the parameters " + std::to_string(size));
    }
    for (float v : buffer.values) {
      if (!std::isfinite(v)) {
        return fail(errc::invalid_argument,
                    self + " optimizer state: buffer '" + buffer.name + "' is not finite");
      }
    }
  }
  return {};
}

OptimizerState::Buffer export_buffer(const char* name, const AlignedVector<float>& values) {
  return {name, std::vector<float>(values.begin(), values.end())};
}

void import_buffer(const OptimizerState::Buffer& buffer, AlignedVector<float>& values) {
  std::copy(buffer.values.begin(), buffer.values.end(), values.begin());
}

// What both optimizers share: their configuration, whose learning rate a schedule may
// change between steps.
class ConfiguredOptimizer : public Optimizer {
 public:
  explicit ConfiguredOptimizer(const OptimizerConfig& config) : config_(config) {}

  float learning_rate() const noexcept final { return config_.learning_rate; }
  void set_learning_rate(float lr) final {
    FEDCORE_ASSERT(lr > 0 && std::isfinite(lr), "learning rate must be positive");
    config_.learning_rate = lr;
  }

 protected:
  OptimizerConfig config_;
};

class Sgd final : public ConfiguredOptimizer {
 public:
  Sgd(const OptimizerConfig& config, std::size_t n)
      : ConfiguredOptimizer(config), size_(n), velocity_(config.momentum > 0 ? n : 0) {}

  void step(std::span<float> params, std::span<const float> grads) override {
    FEDCORE_ASSERT(params.size() == grads.size(), "Sgd::step: size mismatch");
    const float lr = config_.learning_rate;
    const float wd = config_.weight_decay;
    const float mu = config_.momentum;
    const std::size_t n = params.size();
    float* p = params.data();
    const float* g = grads.data();
    if (mu == 0.0f) {
      for_each_chunk(n, kParallelMin, [&](std::size_t begin, std::size_t end) {
        kernels::sgd(p, g, begin, end, lr, wd);
      });
      ++steps_;
      return;
    }
    FEDCORE_ASSERT(velocity_.size() == n, "Sgd::step: size differs from construction");
    float* v = velocity_.data();
    // PyTorch starts the momentum buffer at the first gradient, not at zero.
    const float dampening_first = steps_ == 0 ? 0.0f : 1.0f;
    const bool nesterov = config_.nesterov;
    for_each_chunk(n, kParallelMin, [&](std::size_t begin, std::size_t end) {
      kernels::sgd_momentum(p, g, v, begin, end, lr, wd, mu, dampening_first, nesterov);
    });
    ++steps_;
  }

  void reset() override {
    std::fill(velocity_.begin(), velocity_.end(), 0.0f);
    steps_ = 0;
  }

  OptimizerState state() const override {
    OptimizerState out{.kind = OptimizerKind::sgd, .steps = steps_, .buffers = {}};
    if (has_velocity())
      out.buffers.push_back(export_buffer("velocity", velocity_));
    return out;
  }

  result<void> load_state(const OptimizerState& state) override {
    auto ok = has_velocity() ? check_state(state, OptimizerKind::sgd, {"velocity"}, size_)
                             : check_state(state, OptimizerKind::sgd, {}, size_);
    if (!ok)
      return ok;
    if (has_velocity())
      import_buffer(state.buffers[0], velocity_);
    steps_ = state.steps;
    return {};
  }

 private:
  bool has_velocity() const noexcept { return config_.momentum > 0; }

  std::size_t size_;
  AlignedVector<float> velocity_;
  std::int64_t steps_ = 0;
};

class Adam final : public ConfiguredOptimizer {
 public:
  Adam(const OptimizerConfig& config, std::size_t n)
      : ConfiguredOptimizer(config), m_(n, 0.0f), s_(n, 0.0f) {}

  void step(std::span<float> params, std::span<const float> grads) override {
    FEDCORE_ASSERT(params.size() == grads.size() && params.size() == m_.size(),
                   "Adam::step: size mismatch");
    ++t_;
    const float b1 = config_.beta1;
    const float b2 = config_.beta2;
    const float bias1 = 1.0f - std::pow(b1, static_cast<float>(t_));
    const float bias2_sqrt = std::sqrt(1.0f - std::pow(b2, static_cast<float>(t_)));
    const float step_size = config_.learning_rate / bias1;
    const float wd = config_.weight_decay;
    const float eps = config_.epsilon;
    float* p = params.data();
    const float* g = grads.data();
    float* m = m_.data();
    float* s = s_.data();
    const std::size_t n = params.size();
    for_each_chunk(n, kParallelMin, [&](std::size_t begin, std::size_t end) {
      kernels::adam(p, g, m, s, begin, end, step_size, wd, b1, b2, bias2_sqrt, eps);
    });
  }

  void reset() override {
    std::fill(m_.begin(), m_.end(), 0.0f);
    std::fill(s_.begin(), s_.end(), 0.0f);
    t_ = 0;
  }

  OptimizerState state() const override {
    return {.kind = OptimizerKind::adam,
            .steps = t_,
            .buffers = {export_buffer("m", m_), export_buffer("s", s_)}};
  }

  result<void> load_state(const OptimizerState& state) override {
    if (auto ok = check_state(state, OptimizerKind::adam, {"m", "s"}, m_.size()); !ok)
      return ok;
    import_buffer(state.buffers[0], m_);
    import_buffer(state.buffers[1], s_);
    t_ = state.steps;
    return {};
  }

 private:
  AlignedVector<float> m_;
  AlignedVector<float> s_;
  std::int64_t t_ = 0;
};

}  // namespace

result<OptimizerConfig> optimizer_config_from_json(const nlohmann::json& j) {
  return optimizer_config_from_json(j, JsonPath("optimizer"));
}

result<OptimizerConfig> optimizer_config_from_json(const nlohmann::json& j, const JsonPath& at) {
  StrictObject o(
      j, at, {"kind", "lr", "momentum", "nesterov", "weight_decay", "beta1", "beta2", "epsilon"});
  OptimizerConfig config;
  std::string kind = optimizer_kind_name(config.kind);
  o.choice("kind", kind, {"sgd", "adam"});
  config.kind = kind == "adam" ? OptimizerKind::adam : OptimizerKind::sgd;
  o.number("lr", config.learning_rate, {0, 100, true});
  o.number("momentum", config.momentum, {0, 0.999999});
  o.boolean("nesterov", config.nesterov);
  o.number("weight_decay", config.weight_decay, {0, 10});
  o.number("beta1", config.beta1, {0, 0.999999});
  // beta2 = 1 would divide by 1 - beta2^t = 0 in the bias correction; epsilon = 0 by a zero
  // second moment.
  o.number("beta2", config.beta2, {0, 1, false, true});
  o.number("epsilon", config.epsilon, {0, 1, true});
  // A key the chosen optimizer would ignore is an error, so that {"kind": "adam",
  // "momentum": 0.9} does not train without the momentum its author asked for. The neutral
  // values (momentum 0, nesterov false) are accepted: tools that pass every flag send them.
  if (config.kind == OptimizerKind::adam) {
    if (config.momentum != 0.0f) {
      o.reject("momentum", "applies only to sgd (adam's counterpart is beta1)");
    }
    if (config.nesterov) {
      o.reject("nesterov", "applies only to sgd");
    }
  } else {
    for (const char* key : {"beta1", "beta2", "epsilon"}) {
      if (o.has(key)) {
        o.reject(key, "applies only to adam");
      }
    }
  }
  if (config.nesterov && !(config.momentum > 0.0f)) {
    o.reject("nesterov", "needs 'momentum' > 0");
  }
  if (auto done = o.status(); !done) {
    return done.error();
  }
  return config;
}

void to_json(nlohmann::json& j, const OptimizerConfig& c) {
  if (c.kind == OptimizerKind::sgd) {
    j = {{"kind", "sgd"},
         {"lr", c.learning_rate},
         {"momentum", c.momentum},
         {"nesterov", c.nesterov},
         {"weight_decay", c.weight_decay}};
  } else {
    j = {{"kind", "adam"},   {"lr", c.learning_rate}, {"beta1", c.beta1},
         {"beta2", c.beta2}, {"epsilon", c.epsilon},  {"weight_decay", c.weight_decay}};
  }
}

const char* optimizer_kind_name(OptimizerKind kind) noexcept {
  return kind == OptimizerKind::adam ? "adam" : "sgd";
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::size_t param_count) {
  if (config.kind == OptimizerKind::adam) {
    return std::make_unique<Adam>(config, param_count);
  }
  return std::make_unique<Sgd>(config, param_count);
}

}  // namespace fedcore::model
