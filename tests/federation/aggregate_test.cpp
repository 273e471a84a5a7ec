#include "server/federation/aggregate.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "shared/util/rng.hpp"

namespace fedcore::federation {
namespace {

model::ParamLayout small_layout() {
  model::ParamLayout layout;
  layout.append("fc.weight", {3, 2});
  layout.append("fc.bias", {2});
  return layout;
}

TEST(WeightedAverage, EqualsTheSampleWeightedMeanTo1e6) {
  Rng rng(1);
  const std::size_t n = 10000;
  const std::vector<double> weights{1204, 37, 999, 5, 12000};
  std::vector<std::vector<float>> updates(weights.size(), std::vector<float>(n));
  for (auto& u : updates) {
    for (auto& v : u) {
      v = static_cast<float>(rng.normal());
    }
  }
  auto strategy = make_strategy("fedavg", n);
  ASSERT_TRUE(strategy);
  std::vector<float> global(n, 0.0f);
  (*strategy)->begin_round(global);
  for (std::size_t c = 0; c < updates.size(); ++c) {
    (*strategy)->add_update(updates[c], static_cast<std::uint64_t>(weights[c]));
  }
  EXPECT_EQ((*strategy)->updates(), weights.size());
  global = (*strategy)->finish_round();
  ASSERT_EQ(global.size(), n);
  double total = 0;
  for (double w : weights) {
    total += w;
  }
  double max_error = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double expected = 0;
    for (std::size_t c = 0; c < updates.size(); ++c) {
      expected += weights[c] * updates[c][i];
    }
    expected /= total;
    max_error = std::max(max_error, std::abs(expected - global[i]));
  }
  EXPECT_LE(max_error, 1e-6);
}

TEST(WeightedAverage, NewRoundStartsFromZero) {
  WeightedAverage average(2);
  average.add(std::vector<float>{1, 1}, 1);
  average.clear();
  average.add(std::vector<float>{4, 6}, 2);
  EXPECT_EQ(average.take_mean(), (std::vector<float>{4, 6}));
  EXPECT_EQ(average.count(), 0u);
}

TEST(ValidateUpdate, AcceptsAGoodUpdate) {
  const auto layout = small_layout();
  const std::vector<float> global(8, 0.0f), update(8, 0.1f);
  EXPECT_FALSE(validate_update(update, layout.fingerprint_hex(), 10, global, layout, {}));
}

TEST(ValidateUpdate, RejectsEachBadUpdateWithItsReason) {
  const auto layout = small_layout();
  const std::vector<float> global(8, 0.0f);
  std::vector<float> nan_update(8, 0.0f);
  nan_update[6] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> inf_update(8, 0.0f);
  inf_update[1] = std::numeric_limits<float>::infinity();

  auto r = validate_update(nan_update, layout.fingerprint_hex(), 10, global, layout, {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, Rejection::non_finite);
  EXPECT_NE(r->message.find("fc.bias[0] is NaN"), std::string::npos) << r->message;

  r = validate_update(inf_update, layout.fingerprint_hex(), 10, global, layout, {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, Rejection::non_finite);
  EXPECT_NE(r->message.find("fc.weight[1] is infinite"), std::string::npos) << r->message;

  r = validate_update(std::vector<float>(7, 0.0f), layout.fingerprint_hex(), 10, global, layout,
                      {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, Rejection::shape);
  EXPECT_NE(r->message.find("7 values, the model has 8"), std::string::npos);

  r = validate_update(global, "0000000000000000", 10, global, layout, {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, Rejection::layout);

  r = validate_update(global, layout.fingerprint_hex(), 0, global, layout, {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, Rejection::samples);

  std::vector<float> far(8, 1.0f);  // L2 distance sqrt(8) = 2.83
  r = validate_update(far, layout.fingerprint_hex(), 10, global, layout, {.max_update_norm = 2.0});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, Rejection::norm);
  EXPECT_NE(r->message.find("2.828"), std::string::npos) << r->message;
  EXPECT_FALSE(
      validate_update(far, layout.fingerprint_hex(), 10, global, layout, {.max_update_norm = 3.0}));
}

TEST(ValidateUpdate, EachRejectionHasAStableName) {
  // The names are a public contract: metrics labels and the reason_code of events.
  EXPECT_EQ(rejection_name(Rejection::layout), "layout");
  EXPECT_EQ(rejection_name(Rejection::shape), "shape");
  EXPECT_EQ(rejection_name(Rejection::non_finite), "non_finite");
  EXPECT_EQ(rejection_name(Rejection::samples), "samples");
  EXPECT_EQ(rejection_name(Rejection::norm), "norm");
}

TEST(Strategy, UnknownNameIsInvalidArgument) {
  auto s = make_strategy("fedmagic", 4);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, errc::invalid_argument);
}

}  // namespace
}  // namespace fedcore::federation
