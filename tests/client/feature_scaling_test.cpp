// Feature scaling at the site: TRAIN's "scaling" applied to a copy of the data, the report
// a site gives when asked for its statistics, and a session answering the request (over a
// local socket pair, with a scripted fake server; no network, no sleeping).
#include "client/feature_scaling.hpp"

#include <cmath>
#include <deque>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <gtest/gtest.h>

#include "client/audit_log.hpp"
#include "client/local_trainer.hpp"
#include "client/session.hpp"
#include "shared/data/feature_stats.hpp"
#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"
#include "tests/client/client_test_support.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::client {
namespace {

namespace asio = boost::asio;
using protocol::MessageType;
using protocol::ScalingMode;
using testing::tiny_data;

constexpr const char* kNonce = "00000000000000000000000000000abc";

// Mean and population standard deviation of one feature (two passes in double).
std::pair<double, double> moments(const data::Dataset& d, Eigen::Index f) {
  const Eigen::ArrayXd row = d.features.row(f).cast<double>();
  const double mean = row.mean();
  return {mean, std::sqrt((row - mean).square().mean())};
}

TEST(ScaledCopy, SiteStandardisesBothSplitsWithTheTrainingSplitsStatistics) {
  const auto data = tiny_data();
  auto scaled = scaled_copy({ScalingMode::site, {}, {}}, data);
  ASSERT_TRUE(scaled) << scaled.error().to_string();
  for (Eigen::Index f : {0, 2, 3}) {
    const auto [mean, stddev] = moments(scaled->train, f);
    EXPECT_NEAR(mean, 0.0, 1e-6) << f;
    EXPECT_NEAR(stddev, 1.0, 1e-5) << f;
    // The test split with the training split's statistics, not its own.
    const auto [train_mean, train_std] = moments(data.train, f);
    for (Eigen::Index j = 0; j < data.test.features.cols(); ++j) {
      EXPECT_NEAR(scaled->test.features(f, j), (data.test.features(f, j) - train_mean) / train_std,
                  1e-5)
          << f << "," << j;
    }
  }
  // Feature 1 is the constant 0.5: it becomes 0, not a division by zero.
  EXPECT_TRUE((scaled->train.features.row(1).array() == 0.0f).all());
  EXPECT_TRUE(scaled->train.features.allFinite());
  // The original is untouched.
  EXPECT_EQ(data.train.features, tiny_data().train.features);
}

TEST(ScaledCopy, FederatedAppliesTheRunsScaleExactly) {
  const auto data = tiny_data();
  const protocol::FeatureScaling scaling{
      ScalingMode::federated, {1.0, 0.5, 0.0, -2.0}, {2.0, 1.0, 0.25, 4.0}};
  auto scaled = scaled_copy(scaling, data);
  ASSERT_TRUE(scaled) << scaled.error().to_string();
  for (Eigen::Index f = 0; f < 4; ++f) {
    for (Eigen::Index j = 0; j < data.train.features.cols(); ++j) {
      const auto i = static_cast<std::size_t>(f);
      EXPECT_FLOAT_EQ(
          scaled->train.features(f, j),
          static_cast<float>((data.train.features(f, j) - scaling.mean[i]) / scaling.stddev[i]));
    }
    EXPECT_FLOAT_EQ(
        scaled->test.features(f, 0),
        static_cast<float>((data.test.features(f, 0) - scaling.mean[f]) / scaling.stddev[f]));
  }
  auto unchanged = scaled_copy({ScalingMode::none, {}, {}}, data);
  ASSERT_TRUE(unchanged);
  EXPECT_EQ(unchanged->train.features, data.train.features);
}

TEST(ScaledCopy, AScaleThatDoesNotFitTheDataIsRefused) {
  const auto data = tiny_data();
  auto narrow = scaled_copy({ScalingMode::federated, {0, 0, 0}, {1, 1, 1}}, data);
  ASSERT_FALSE(narrow);
  EXPECT_EQ(narrow.error().code, errc::failed_precondition);
  EXPECT_NE(narrow.error().message.find("the run expects 3 features, this site's data has 4"),
            std::string::npos)
      << narrow.error().message;
  auto images = data;
  images.train.sample_shape = {2, 2, 1};
  auto refused = scaled_copy({ScalingMode::site, {}, {}}, images);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::failed_precondition);
}

TEST(FeatureStatsReport, IsTheTrainingSplitsMomentsEchoingTheRequest) {
  const auto data = tiny_data();
  auto report = feature_stats_report({9, kNonce, 4}, data.train);
  ASSERT_TRUE(report) << report.error().to_string();
  EXPECT_EQ(report->run_id, 9);
  EXPECT_EQ(report->nonce, kNonce);
  EXPECT_EQ(report->features, 4u);
  const auto expected = data::feature_moments(data.train);
  EXPECT_EQ(report->count, expected.count);
  EXPECT_EQ(report->sum, expected.sum);
  EXPECT_EQ(report->sum_squares, expected.sum_squares);
  EXPECT_EQ(report->count[0], 24u);
  // It passes the receiver's checks.
  EXPECT_TRUE(protocol::parse_feature_stats_report(protocol::to_metadata(*report)));

  auto wrong = feature_stats_report({9, kNonce, 30}, data.train);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, errc::failed_precondition);
}

TEST(FeatureStatsReport, SitesRequiringSecureAggregationOrDpDoNotShare) {
  EXPECT_TRUE(shares_feature_statistics(SitePolicy{}));
  SitePolicy secure;
  secure.require_secure_aggregation = true;
  EXPECT_FALSE(shares_feature_statistics(secure));
  SitePolicy dp;
  dp.max_epsilon = 8.0;
  EXPECT_FALSE(shares_feature_statistics(dp));
}

// The trainer evaluates and trains on the scaled copy: its evaluation of the received
// model is the evaluation on the scaled test split.
TEST(LocalTrainerScaling, TrainsAndEvaluatesOnTheScaledData) {
  const auto data = tiny_data();
  const auto announced = testing::announced_logreg();
  auto request = testing::train_request(announced, 1);
  request.evaluate = true;
  request.scaling = {ScalingMode::federated, {1.0, 0.5, 0.0, -2.0}, {2.0, 1.0, 0.25, 4.0}};
  const auto local = train_locally(request, announced.global, data, 1);
  ASSERT_FALSE(local.failure) << local.failure->message;
  ASSERT_TRUE(local.report.evaluation);

  auto scaled = scaled_copy(request.scaling, data);
  auto spec = model::complete_spec(*model::parse_model_spec(announced.spec), {4}, 2);
  auto m = model::build_model(*spec);
  std::copy(announced.global.begin(), announced.global.end(), m->params().begin());
  const auto expected = model::evaluate(*m, model::loss_for(*spec), scaled->test);
  EXPECT_DOUBLE_EQ(local.report.evaluation->loss, expected.loss);

  request.scaling.mean.pop_back();
  request.scaling.stddev.pop_back();
  const auto refused = train_locally(request, announced.global, data, 1);
  ASSERT_TRUE(refused.failure);
  EXPECT_EQ(refused.failure->code, errc::failed_precondition);
}

// ---- The session

std::shared_ptr<net::Link> link_over(net::LocalStream stream) {
  return std::make_shared<net::StreamLink<net::LocalStream>>(std::move(stream),
                                                             net::ChannelOptions{});
}

class FakeServer {
 public:
  FakeServer(asio::io_context& io, net::LocalStream stream) : link_(link_over(std::move(stream))) {
    asio::co_spawn(io, read_all(), asio::detached);
  }
  void send(MessageType type, std::string metadata) { link_->send(type, std::move(metadata)); }
  std::size_t count(MessageType type) const {
    return static_cast<std::size_t>(std::count_if(
        frames_.begin(), frames_.end(), [&](const protocol::Frame& f) { return f.type == type; }));
  }
  const protocol::Frame* last(MessageType type) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      if (it->type == type) {
        return &*it;
      }
    }
    return nullptr;
  }

 private:
  asio::awaitable<void> read_all() {
    auto link = link_;
    while (true) {
      auto frame = co_await link->read_frame();
      if (!frame) {
        co_return;
      }
      frames_.push_back(std::move(*frame));
    }
  }
  std::shared_ptr<net::Link> link_;
  std::deque<protocol::Frame> frames_;
};

class SessionScalingTest : public ::testing::Test {
 protected:
  SessionScalingTest() : sleeper_(io_, clock_), data_(tiny_data()) {}

  void start(bool shares, AuditLog* audit = nullptr) {
    auto [client_end, server_end] = testing::socket_pair(io_);
    server_ = std::make_unique<FakeServer>(io_, std::move(server_end));
    SessionHooks hooks;
    hooks.train = [this](const protocol::TrainRequest& request, std::span<const float> global,
                         std::span<const float>) -> asio::awaitable<LocalResult> {
      co_return train_locally(request, global, data_, 1);
    };
    if (shares) {
      hooks.feature_stats = [this](const protocol::FeatureStatsRequest& request) {
        return feature_stats_report(request, data_.train);
      };
    }
    hooks.audit = audit;
    session_ = std::make_unique<ClientSession>(io_, link_over(std::move(client_end)), sleeper_,
                                               std::move(hooks), "fake-server");
    protocol::Hello hello;
    hello.samples = data_.train.size();
    hello.input_shape = {4};
    hello.num_classes = 2;
    hello.capabilities = {"train", "evaluate"};
    asio::co_spawn(
        io_, [this, hello]() -> asio::awaitable<void> { ended_ = co_await session_->run(hello); },
        asio::detached);
    ASSERT_TRUE(arrived(MessageType::hello, 1));
    server_->send(MessageType::welcome, protocol::to_metadata(protocol::Welcome{"site-1", 15}));
  }
  bool arrived(MessageType type, std::size_t n) {
    return testing::run_until(io_, [&] { return server_->count(type) >= n; });
  }
  std::vector<std::string> announced_capabilities() {
    auto hello = protocol::parse_hello(server_->last(MessageType::hello)->metadata);
    EXPECT_TRUE(hello);
    return hello->capabilities;
  }

  asio::io_context io_;
  ManualClock clock_;
  net::ManualSleeper sleeper_;
  data::TrainTest data_;
  std::unique_ptr<FakeServer> server_;
  std::unique_ptr<ClientSession> session_;
  std::optional<result<void>> ended_;
};

TEST_F(SessionScalingTest, ASiteThatSharesAnnouncesItAnswersAndAuditsFirst) {
  fedcore::testing::TempDir dir;
  auto audit = AuditLog::open(dir.path("audit.jsonl"), clock_);
  ASSERT_TRUE(audit) << audit.error().to_string();
  start(true, audit->get());
  EXPECT_EQ(announced_capabilities(),
            (std::vector<std::string>{"train", "evaluate", "feature_stats"}));
  server_->send(MessageType::feature_stats_request,
                protocol::to_metadata(protocol::FeatureStatsRequest{3, kNonce, 4}));
  ASSERT_TRUE(arrived(MessageType::feature_stats, 1));
  auto report =
      protocol::parse_feature_stats_report(server_->last(MessageType::feature_stats)->metadata);
  ASSERT_TRUE(report) << report.error().to_string();
  EXPECT_EQ(report->run_id, 3);
  EXPECT_EQ(report->nonce, kNonce);
  EXPECT_EQ(report->sum, data::feature_moments(data_.train).sum);
  EXPECT_EQ((*audit)->lines(), 1u);
  EXPECT_EQ(server_->count(MessageType::error), 0u);

  // A request that does not fit the site's data is answered with an ERROR, not numbers.
  server_->send(MessageType::feature_stats_request,
                protocol::to_metadata(protocol::FeatureStatsRequest{3, kNonce, 30}));
  ASSERT_TRUE(arrived(MessageType::error, 1));
  auto error = protocol::parse_error_message(server_->last(MessageType::error)->metadata);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code, "failed_precondition");
  EXPECT_EQ(server_->count(MessageType::feature_stats), 1u);
  EXPECT_EQ((*audit)->lines(), 1u);
  session_->stop();
}

TEST_F(SessionScalingTest, ASiteThatDoesNotShareSaysSo) {
  start(false);
  EXPECT_EQ(announced_capabilities(), (std::vector<std::string>{"train", "evaluate"}));
  server_->send(MessageType::feature_stats_request,
                protocol::to_metadata(protocol::FeatureStatsRequest{3, kNonce, 4}));
  ASSERT_TRUE(arrived(MessageType::error, 1));
  auto error = protocol::parse_error_message(server_->last(MessageType::error)->metadata);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code, "failed_precondition");
  EXPECT_EQ(error->message, "this site does not report feature statistics");
  EXPECT_EQ(server_->count(MessageType::feature_stats), 0u);
  session_->stop();
}

}  // namespace
}  // namespace fedcore::client
