// Top-k's error feedback at the site: what one round did not send is added to the next
// round's step of the same run, and to nothing else.
#include "client/error_feedback.hpp"

#include <gtest/gtest.h>

namespace fedcore::client {
namespace {

TEST(ErrorFeedback, AddsTheRunsResidualToItsNextStepOnly) {
  ErrorFeedback feedback;
  std::vector<float> step{1, 2, 3};
  feedback.add_residual(7, step);  // nothing kept yet
  EXPECT_EQ(step, (std::vector<float>{1, 2, 3}));
  feedback.keep(7, {0.5f, 0, -1});
  feedback.add_residual(7, step);
  EXPECT_EQ(step, (std::vector<float>{1.5f, 2, 2}));
  std::vector<float> other_run{1, 1, 1};
  feedback.add_residual(8, other_run);  // another run starts from none
  EXPECT_EQ(other_run, (std::vector<float>{1, 1, 1}));
  std::vector<float> other_size{1, 1};
  feedback.add_residual(7, other_size);  // another model: the residual does not fit
  EXPECT_EQ(other_size, (std::vector<float>{1, 1}));
  feedback.keep(8, {1, 1, 1});  // one residual is kept: the latest run's
  std::vector<float> back_to_seven{0, 0, 0};
  feedback.add_residual(7, back_to_seven);
  EXPECT_EQ(back_to_seven, (std::vector<float>{0, 0, 0}));
}

}  // namespace
}  // namespace fedcore::client
