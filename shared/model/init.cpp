#include "shared/model/init.hpp"

#include <cmath>

namespace fedcore::model {

void glorot_uniform(std::span<float> values, double fan_in, double fan_out, Rng& rng) {
  const double limit = std::sqrt(6.0 / (fan_in + fan_out));
  for (auto& v : values) {
    v = static_cast<float>((2.0 * rng.uniform_double() - 1.0) * limit);
  }
}

}  // namespace fedcore::model
