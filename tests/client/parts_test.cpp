// The daemon's parts without any connection: local training, the data sources, and the
// manual sleeper the session tests rely on (the backoff schedule: backoff_test.cpp).
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <gtest/gtest.h>

#include "client/data_source.hpp"
#include "client/local_trainer.hpp"
#include "shared/net/sleeper.hpp"
#include "shared/util/source_tree.hpp"
#include "tests/client/client_test_support.hpp"

namespace fedcore::client {
namespace {

using namespace std::chrono_literals;
using testing::announced_logreg;
using testing::tiny_data;
using testing::train_request;

TEST(LocalTrainer, TrainsAndEchoesTheRequestsBinding) {
  const auto data = tiny_data();
  const auto model = announced_logreg();
  auto request = train_request(model, 6);
  request.evaluate = true;
  const auto out = train_locally(request, model.global, data, 1);
  ASSERT_FALSE(out.failure) << out.failure->message;
  EXPECT_EQ(out.report.run_id, 3);
  EXPECT_EQ(out.report.round, 6);
  EXPECT_EQ(out.report.nonce, request.nonce);
  EXPECT_EQ(out.report.layout_fingerprint, model.fingerprint);
  EXPECT_EQ(out.report.samples, 24u);
  ASSERT_TRUE(out.report.evaluation);
  EXPECT_EQ(out.report.evaluation->samples, 4u);  // the local test split
  ASSERT_EQ(out.params.size(), model.global.size());
  EXPECT_NE(out.params, model.global);
  // Deterministic: the same request trains to the same parameters.
  EXPECT_EQ(train_locally(request, model.global, data, 1).params, out.params);
}

TEST(LocalTrainer, RefusesWhatItCannotHonourWithAReason) {
  const auto data = tiny_data();
  const auto model = announced_logreg();
  auto wrong_layout = train_request(model, 1);
  wrong_layout.layout_fingerprint = std::string(16, 'b');
  auto out = train_locally(wrong_layout, model.global, data, 1);
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->code, errc::failed_precondition);

  auto short_global = model.global;
  short_global.pop_back();
  out = train_locally(train_request(model, 1), short_global, data, 1);
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->code, errc::failed_precondition);

  auto bad_optimizer = train_request(model, 1);
  bad_optimizer.settings.optimizer = {{"kind", "lbfgs"}};
  out = train_locally(bad_optimizer, model.global, data, 1);
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->code, errc::invalid_argument);

  auto bad_model = train_request(model, 1);
  bad_model.model_spec = {{"type", "transformer"}};
  out = train_locally(bad_model, model.global, data, 1);
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->code, errc::invalid_argument);
}

TEST(DataSource, LoadsACsvAndSplitsOffALocalTestPart) {
  DataSource source;
  source.format = "csv";
  source.path = fedcore::source_path("data/breast_cancer_wisconsin.csv");
  source.label_column = "benign";
  auto loaded = load_local_data(source);
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ(loaded->train.size() + loaded->test.size(), 569u);
  EXPECT_NEAR(double(loaded->test.size()) / 569.0, 0.2, 0.01);
  EXPECT_EQ(loaded->train.num_classes, 2);

  source.partition = "iid";
  source.partition_clients = 4;
  source.partition_index = 2;
  auto share = load_local_data(source);
  ASSERT_TRUE(share);
  EXPECT_NEAR(double(share->train.size() + share->test.size()), 569.0 / 4, 1.0);
}

TEST(DataSource, EachBadSourceIsRefusedWithWhatWasWrong) {
  DataSource source;
  source.format = "parquet";
  auto r = load_local_data(source);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::invalid_argument);
  EXPECT_NE(r.error().message.find("cifar10"), std::string::npos) << r.error().message;

  source.format = "cifar10";
  r = load_local_data(source);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("data_batch"), std::string::npos) << r.error().message;

  source.format = "csv";
  source.path = fedcore::source_path("data/no-such-file.csv");
  r = load_local_data(source);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("no-such-file.csv"), std::string::npos) << r.error().message;

  source.path = fedcore::source_path("data/breast_cancer_wisconsin.csv");
  source.label_column = "benign";
  source.partition = "iid";
  source.partition_clients = 3;
  source.partition_index = 3;
  r = load_local_data(source);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("out of range"), std::string::npos) << r.error().message;

  // 3 x 200 shards: more than the 569 samples can make: refused with the numbers, not an abort.
  source.partition = "shards:200";
  source.partition_index = 0;
  r = load_local_data(source);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("needs at least 600 training samples"), std::string::npos)
      << r.error().message;
}

TEST(ManualSleeper, ASleepEndsOnlyWhenTheClockPassesItsWakeTime) {
  boost::asio::io_context io;
  ManualClock clock;
  net::ManualSleeper sleeper(io, clock);
  std::optional<bool> first, second, third;
  auto sleep = [&](std::chrono::milliseconds d, std::optional<bool>& out,
                   const void* owner) -> boost::asio::awaitable<void> {
    out = co_await sleeper.sleep_for(d, owner);
  };
  int owner_a = 0, owner_b = 0;
  boost::asio::co_spawn(io, sleep(10s, first, &owner_a), boost::asio::detached);
  boost::asio::co_spawn(io, sleep(20s, second, &owner_a), boost::asio::detached);
  boost::asio::co_spawn(io, sleep(30s, third, &owner_b), boost::asio::detached);
  io.poll();
  EXPECT_EQ(sleeper.sleeping(), 3u);
  EXPECT_EQ(sleeper.next_wake(), 10s);
  sleeper.advance(9s);
  io.poll();
  EXPECT_FALSE(first);
  sleeper.advance(1s);
  io.poll();
  EXPECT_EQ(first, true);
  EXPECT_FALSE(second);
  sleeper.cancel(&owner_a);  // ends the second, not the third
  io.poll();
  EXPECT_EQ(second, false);
  EXPECT_FALSE(third);
  sleeper.cancel_all();
  io.poll();
  EXPECT_EQ(third, false);
  EXPECT_EQ(sleeper.sleeping(), 0u);
}

}  // namespace
}  // namespace fedcore::client
