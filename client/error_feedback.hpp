// Top-k compression's error feedback at the site (Stich et al. 2018, "Sparsified SGD with
// Memory"; shared/protocol/update_encoding.hpp): what a round's top-k did not send is kept
// and added to the next round's step, so every coordinate's movement reaches the server
// eventually instead of being lost.
//
// One residual is kept, for the run the site last trained for (a new run starts from none):
// the memory is one model. It lives in the daemon, not the session, so a reconnect between
// rounds keeps it. Thread safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace fedcore::client {

class ErrorFeedback {
 public:
  // Adds the residual carried for `run_id` to `step`, in place (nothing for another run or
  // another size).
  void add_residual(std::int64_t run_id, std::span<float> step);
  // What this round did not send, for the next round of `run_id`.
  void keep(std::int64_t run_id, std::vector<float> residual);

 private:
  std::mutex mutex_;
  std::int64_t run_id_ = 0;      // guarded by mutex_
  std::vector<float> residual_;  // guarded by mutex_
};

}  // namespace fedcore::client
