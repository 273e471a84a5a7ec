#include "client/error_feedback.hpp"

#include <utility>

namespace fedcore::client {

void ErrorFeedback::add_residual(std::int64_t run_id, std::span<float> step) {
  std::lock_guard lock(mutex_);
  if (run_id == run_id_ && residual_.size() == step.size()) {
    for (std::size_t i = 0; i < step.size(); ++i) {
      step[i] += residual_[i];
    }
  }
}

void ErrorFeedback::keep(std::int64_t run_id, std::vector<float> residual) {
  std::lock_guard lock(mutex_);
  run_id_ = run_id;
  residual_ = std::move(residual);
}

}  // namespace fedcore::client
