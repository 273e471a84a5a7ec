#include "shared/model/proximal.hpp"

#include "shared/util/assert.hpp"

namespace fedcore::model {

double add_proximal_term(std::span<const float> params, std::span<const float> anchor,
                         std::span<float> grads, float mu) {
  if (mu == 0.0f) {
    return 0.0;
  }
  FEDCORE_ASSERT(params.size() == anchor.size() && params.size() == grads.size(),
                 "add_proximal_term: span sizes differ");
  double squared = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float diff = params[i] - anchor[i];
    grads[i] += mu * diff;
    squared += double(diff) * diff;
  }
  return 0.5 * double(mu) * squared;
}

}  // namespace fedcore::model
