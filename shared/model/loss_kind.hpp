// Which loss a model trains with, apart from how it is computed (shared/model/loss.hpp
// needs Eigen; this does not, so a spec can name its loss without pulling Eigen in).
#pragma once

#include <string_view>

namespace fedcore::model {

enum class LossKind { softmax_cross_entropy, binary_cross_entropy };

std::string_view loss_name(LossKind kind) noexcept;

}  // namespace fedcore::model
