#include "client/error_feedback.hpp"

#include <utility>

namespace fedcore::client {

std::vector<float> ErrorFeedback::with_residual(std::int64_t run_id, std::span<const float> step) {
  std::vector<float> out(step.begin(), step.end());
  std::lock_guard lock(mutex_);
  if (run_id == run_id_ && residual_.size() == out.size()) {
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i] += residual_[i];
    }
  }
  return out;
}

void ErrorFeedback::keep(std::int64_t run_id, std::vector<float> residual) {
  std::lock_guard lock(mutex_);
  run_id_ = run_id;
  residual_ = std::move(residual);
}

}  // namespace fedcore::client
