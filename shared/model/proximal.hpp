// The proximal term of FedProx (Li et al. 2020): (mu / 2) * ||w - w_anchor||^2 added to
// the local loss, which pulls a client's weights toward the global model it started from.
// It works on flat spans only, so no layer needs to know about it.
#pragma once

#include <span>

namespace fedcore::model {

// Adds mu * (params - anchor) to grads and returns the penalty (mu / 2) ||params - anchor||^2.
// REQUIRES: all three spans have the same size. mu == 0 is a no-op returning 0.
double add_proximal_term(std::span<const float> params, std::span<const float> anchor,
                         std::span<float> grads, float mu);

}  // namespace fedcore::model
