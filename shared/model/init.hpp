// Parameter initialisers shared by the layers.
#pragma once

#include <span>

#include "shared/util/rng.hpp"

namespace fedcore::model {

// Glorot (Xavier) uniform: U(-a, a) with a = sqrt(6 / (fan_in + fan_out)).
void glorot_uniform(std::span<float> values, double fan_in, double fan_out, Rng& rng);

}  // namespace fedcore::model
