// The result of evaluating a model on a data set (shared/model/trainer.hpp evaluates),
// apart from the trainer so that code which only passes reports on needs no Eigen.
#pragma once

#include <cstddef>

namespace fedcore::model {

struct EvalReport {
  double loss = 0;
  double accuracy = 0;
  std::size_t samples = 0;
};

}  // namespace fedcore::model
