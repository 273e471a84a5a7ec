// SCAFFOLD's control variate at the site (Karimireddy et al. 2020, Algorithm 1; the
// server's side is server/federation/scaffold.hpp).
//
// A SCAFFOLD TRAIN brings the global model x and the server's control variate c. The site
// trains from x with every gradient corrected by (c - c_i), where c_i is its own control
// variate, kept across rounds; after K steps at learning rate lr it holds y and updates
//
//   c_i+ = c_i - c + (x - y) / (K * lr)          (option II of the paper)
//
// and sends y with dc = c_i+ - c_i = (x - y) / (K * lr) - c, which the server averages into c.
//
// One c_i is kept, for the run the site last trained for (a new run starts from zero, as
// the server's c does): the memory is one model. It lives in the daemon, not the session,
// so a reconnect between rounds keeps it; a restarted daemon starts again from zero (the
// server's c then still holds what the site sent before, which SCAFFOLD tolerates like a
// site that was not sampled for a while). Thread safety: all methods may be called from
// any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace fedcore::client {

// dc = (x - y) / (steps * lr) - c into `change`, in double per value. REQUIRES: equal sizes,
// steps > 0, lr > 0; `change` overlaps none of the inputs.
void control_variate_change(std::span<const float> global, std::span<const float> trained,
                            std::span<const float> server_control, std::uint64_t steps, double lr,
                            std::span<float> change);

class ControlVariates {
 public:
  // c - c_i for `run_id`: the correction the site's steps add to each gradient (c_i is zero
  // for a run it has not trained for, or when sizes differ).
  std::vector<float> correction(std::int64_t run_id, std::span<const float> server_control);
  // c_i += dc for `run_id` (from zero for another run), once the update carrying dc is sent.
  void advance(std::int64_t run_id, std::span<const float> change);
  // The site's c_i for `run_id` (empty for another run); for tests and the audit.
  std::vector<float> of(std::int64_t run_id);

 private:
  std::mutex mutex_;
  std::int64_t run_id_ = 0;  // guarded by mutex_
  std::vector<float> mine_;  // c_i, guarded by mutex_
};

}  // namespace fedcore::client
