#include "client/control_variates.hpp"

#include "shared/util/assert.hpp"

namespace fedcore::client {

void control_variate_change(std::span<const float> global, std::span<const float> trained,
                            std::span<const float> server_control, std::uint64_t steps, double lr,
                            std::span<float> change) {
  FEDCORE_ASSERT(global.size() == trained.size() && global.size() == server_control.size() &&
                     global.size() == change.size(),
                 "control_variate_change: sizes differ");
  FEDCORE_ASSERT(steps > 0 && lr > 0, "control_variate_change: no steps or no learning rate");
  // (x - y) / (K lr) is the mean corrected gradient of the K steps; removing c leaves the
  // mean of the site's own gradients minus c_i, i.e. c_i+ - c_i.
  const double scale = 1.0 / (static_cast<double>(steps) * lr);
  for (std::size_t i = 0; i < global.size(); ++i) {
    const double moved = static_cast<double>(global[i]) - static_cast<double>(trained[i]);
    change[i] = static_cast<float>(moved * scale - static_cast<double>(server_control[i]));
  }
}

std::vector<float> ControlVariates::correction(std::int64_t run_id,
                                               std::span<const float> server_control) {
  std::lock_guard lock(mutex_);
  std::vector<float> out(server_control.begin(), server_control.end());
  if (run_id == run_id_ && mine_.size() == out.size()) {
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i] -= mine_[i];
    }
  }
  return out;
}

void ControlVariates::advance(std::int64_t run_id, std::span<const float> change) {
  std::lock_guard lock(mutex_);
  if (run_id != run_id_ || mine_.size() != change.size()) {
    run_id_ = run_id;
    mine_.assign(change.size(), 0.0f);
  }
  for (std::size_t i = 0; i < change.size(); ++i) {
    mine_[i] += change[i];
  }
}

std::vector<float> ControlVariates::of(std::int64_t run_id) {
  std::lock_guard lock(mutex_);
  return run_id == run_id_ ? mine_ : std::vector<float>{};
}

}  // namespace fedcore::client
