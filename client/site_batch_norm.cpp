#include "client/site_batch_norm.hpp"

#include <utility>

namespace fedcore::client {

std::vector<float> SiteBatchNorm::of(std::int64_t run_id) {
  std::lock_guard lock(mutex_);
  return run_id == run_id_ ? values_ : std::vector<float>();
}

void SiteBatchNorm::keep(std::int64_t run_id, std::vector<float> values) {
  std::lock_guard lock(mutex_);
  run_id_ = run_id;
  values_ = std::move(values);
}

}  // namespace fedcore::client
