// Optimizers over flat parameter and gradient spans.
//
// An optimizer owns its state (momentum, Adam moments) as flat buffers of the same
// length as the parameters it was made for; `step` updates the parameters in place from
// the gradients. `reset()` drops the state (e.g. when a federated client receives a new
// global model and starts local training afresh).
//
// Semantics follow PyTorch's torch.optim, so hyper-parameters carry over:
//  SGD:  g += wd * p;  v = mu * v + g  (v = g on the first step);
//        p -= lr * (nesterov ? g + mu * v : v)
//  Adam: g += wd * p;  m = b1 m + (1-b1) g;  s = b2 s + (1-b2) g^2;
//        p -= lr * (m / (1-b1^t)) / (sqrt(s / (1-b2^t)) + eps)
//
// Thread safety: none.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/util/error.hpp"
#include "shared/util/strict_json.hpp"

namespace fedcore::model {

enum class OptimizerKind { sgd, adam };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::sgd;
  float learning_rate = 0.01f;
  float momentum = 0.0f;  // SGD
  bool nesterov = false;  // SGD; needs momentum > 0
  float weight_decay = 0.0f;
  float beta1 = 0.9f;     // Adam
  float beta2 = 0.999f;   // Adam
  float epsilon = 1e-8f;  // Adam
};

// {"kind":"sgd","lr":0.05,"momentum":0.9,"nesterov":false,"weight_decay":0}
// {"kind":"adam","lr":0.001,"beta1":0.9,"beta2":0.999,"epsilon":1e-8,"weight_decay":0}
// Parsed strictly (shared/util/strict_json.hpp): unknown keys, wrong types and
// out-of-range values are errc::invalid_argument naming the key ("optimizer: 'lr' must be
// a number in (0, 100], got 0"), and so is a key of the other kind (beta1 on sgd, a
// non-zero momentum or nesterov on adam). lr in (0, 100], momentum and beta1 in
// [0, 0.999999], beta2 in [0, 1), epsilon in (0, 1], weight_decay in [0, 10]; nesterov
// needs momentum > 0.
result<OptimizerConfig> optimizer_config_from_json(const nlohmann::json& j);
// The same inside another document: JsonPath("run config", "optimizer").
result<OptimizerConfig> optimizer_config_from_json(const nlohmann::json& j, const JsonPath& at);
void to_json(nlohmann::json& j, const OptimizerConfig& config);
// "sgd" or "adam".
const char* optimizer_kind_name(OptimizerKind kind) noexcept;

// An optimizer's state, as plain data: which optimizer it belongs to, how many steps it
// has taken since construction or reset, and its buffers, each as long as the parameters.
//   SGD:  buffers {"velocity"} with momentum > 0, none without; steps == 0 means the
//         momentum buffer starts at the next gradient (PyTorch's first step).
//   Adam: buffers {"m", "s"} (first and second moments); steps is Adam's t, which the
//         bias correction needs.
// Hyper-parameters (learning rate, betas, ...) are configuration, not state.
struct OptimizerState {
  struct Buffer {
    std::string name;
    std::vector<float> values;
  };
  OptimizerKind kind = OptimizerKind::sgd;
  std::int64_t steps = 0;
  std::vector<Buffer> buffers;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // REQUIRES: params.size() == grads.size() == the size given at construction.
  virtual void step(std::span<float> params, std::span<const float> grads) = 0;
  virtual void reset() = 0;

  // A copy of the state; load_state(state()) on an optimizer made with the same
  // configuration and size makes its next steps bit-identical to this one's.
  virtual OptimizerState state() const = 0;
  // Replaces the state. Checks everything before changing anything, so on error the
  // optimizer is unchanged. Errors: failed_precondition when the state belongs to another
  // kind of optimizer, has other buffers (names or count, e.g. SGD with vs. without
  // momentum) or buffers of another length than the parameters; invalid_argument for a
  // negative step count or non-finite values. Messages name the buffer and both sizes.
  virtual result<void> load_state(const OptimizerState& state) = 0;

  // The learning rate of the next steps (initially the configuration's). Used by
  // asynchronous training to damp stale gradients. REQUIRES: lr > 0 and finite.
  virtual float learning_rate() const noexcept = 0;
  virtual void set_learning_rate(float lr) = 0;
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::size_t param_count);

}  // namespace fedcore::model
