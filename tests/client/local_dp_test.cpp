// The local trainer under record-level DP: it trains with DP-SGD from the request's terms,
// refuses terms without a clip or noise, says what its accountant needs, and releases no
// unprotected statistics of its records.
#include <cmath>

#include <gtest/gtest.h>

#include "client/dp_noise.hpp"
#include "client/local_trainer.hpp"
#include "shared/util/rng.hpp"
#include "tests/client/client_test_support.hpp"

namespace fedcore::client {
namespace {

using testing::announced_logreg;
using testing::tiny_data;
using testing::train_request;

protocol::TrainRequest dp_request(const testing::Announced& model, double clip, double z) {
  auto request = train_request(model, 2);
  request.settings.epochs = 2;
  request.settings.batch_size = 6;
  request.evaluate = true;
  request.privacy.dp = protocol::DpMode::record;
  request.privacy.clip_norm = clip;
  request.privacy.noise_multiplier = z;
  return request;
}

model::DpRandom seeded(Rng& normal, Rng& uniform) {
  return {[&normal](std::span<double> out) -> result<void> {
            for (double& x : out) {
              x = normal.normal();
            }
            return {};
          },
          [&uniform](std::span<double> out) -> result<void> {
            for (double& x : out) {
              x = uniform.uniform_double();
            }
            return {};
          }};
}

TEST(LocalDp, TrainsWithDpSgdAndReportsWhatTheAccountantNeeds) {
  const auto data = tiny_data();
  const auto model = announced_logreg();
  const auto request = dp_request(model, 1.0, 1.1);
  Rng normal(1), uniform(2);
  const auto out = train_locally(request, model.global, data, 1, seeded(normal, uniform));
  ASSERT_FALSE(out.failure) << out.failure->message;
  ASSERT_TRUE(out.record_dp);
  EXPECT_DOUBLE_EQ(out.record_dp->sampling_rate, 6.0 / 24.0);
  EXPECT_DOUBLE_EQ(out.record_dp->noise_multiplier, 1.1);
  EXPECT_EQ(out.record_dp->steps, 8u);  // 2 epochs of round(24 / 6)
  EXPECT_NE(out.params, model.global);
  // No unnoised statistic of the private records leaves the site.
  EXPECT_EQ(out.report.loss, 0.0);
  EXPECT_EQ(out.report.accuracy, 0.0);
  EXPECT_FALSE(out.report.evaluation);
  EXPECT_EQ(out.report.nonce, request.nonce);

  // The same injected randomness trains to the same parameters; the request's seed plays
  // no part (DP-SGD must not use a seed the server knows).
  auto reseeded = request;
  reseeded.settings.seed = 99;
  Rng normal2(1), uniform2(2);
  EXPECT_EQ(train_locally(reseeded, model.global, data, 1, seeded(normal2, uniform2)).params,
            out.params);
}

TEST(LocalDp, WithoutInjectedRandomnessTheCsprngMakesEveryRunDiffer) {
  const auto data = tiny_data();
  const auto model = announced_logreg();
  const auto request = dp_request(model, 1.0, 1.1);
  const auto a = train_locally(request, model.global, data, 1);
  const auto b = train_locally(request, model.global, data, 1);
  ASSERT_FALSE(a.failure) << a.failure->message;
  ASSERT_FALSE(b.failure) << b.failure->message;
  EXPECT_NE(a.params, b.params);
  for (const float p : a.params) {
    ASSERT_TRUE(std::isfinite(p));
  }
}

TEST(LocalDp, RefusesTermsWithoutAClipOrNoise) {
  const auto data = tiny_data();
  const auto model = announced_logreg();
  const double bad[][2] = {{0, 1}, {-1, 1}, {1, 0}, {1, -0.5}, {NAN, 1}, {1, INFINITY}};
  for (const auto& terms : bad) {
    const auto out = train_locally(dp_request(model, terms[0], terms[1]), model.global, data, 1);
    ASSERT_TRUE(out.failure) << terms[0] << ", " << terms[1];
    EXPECT_EQ(out.failure->code, errc::invalid_argument);
    EXPECT_NE(out.failure->message.find("record-level DP"), std::string::npos);
    EXPECT_FALSE(out.record_dp);
  }
}

TEST(LocalDp, WithoutDpTheTrainerIsUnchanged) {
  const auto data = tiny_data();
  const auto model = announced_logreg();
  const auto out = train_locally(train_request(model, 1), model.global, data, 1);
  ASSERT_FALSE(out.failure);
  EXPECT_FALSE(out.record_dp);
  EXPECT_GT(out.report.loss, 0.0);
}

TEST(CryptoUniform, FillsWithDistinctValuesInTheUnitInterval) {
  CryptoUniform uniform;
  std::vector<double> values(100000);
  ASSERT_TRUE(uniform.fill(values));
  double sum = 0;
  for (const double v : values) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    sum += v;
  }
  // Mean 1/2 with standard error sqrt(1/12/1e5) = 0.0009.
  EXPECT_NEAR(sum / double(values.size()), 0.5, 0.005);
  std::vector<double> again(values.size());
  ASSERT_TRUE(uniform.fill(again));
  EXPECT_NE(values, again);
}

}  // namespace
}  // namespace fedcore::client
