// The admin control plane of FederationServer over a real federation: manual runs that
// wait for advance_round(), stop_run() in its states, the event feed, sessions, traffic.
#include <mutex>

#include <gtest/gtest.h>

#include "shared/util/source_tree.hpp"
#include "tests/federation/federation_fixture.hpp"

namespace fedcore {
namespace {

using federation::FederationServer;
using testing::Federation;
using testing::TempDir;

client::DataSource breast_cancer() {
  client::DataSource source;
  source.format = "csv";
  source.path = fedcore::source_path("data/breast_cancer_wisconsin.csv");
  source.label_column = "benign";
  return source;
}

// Events delivered by subscribe_events(), collected across threads.
class EventLog {
 public:
  void add(const store::EventRecord& e) {
    std::lock_guard lock(mutex_);
    events_.push_back(e);
  }
  std::vector<store::EventRecord> snapshot() const {
    std::lock_guard lock(mutex_);
    return events_;
  }
  std::size_t count(const std::string& kind) const {
    std::lock_guard lock(mutex_);
    return std::count_if(events_.begin(), events_.end(),
                         [&](const auto& e) { return e.kind == kind; });
  }

 private:
  mutable std::mutex mutex_;
  std::vector<store::EventRecord> events_;
};

class ControlPlane : public ::testing::Test {
 protected:
  void start(int clients) {
    for (int i = 1; i <= clients; ++i) {
      federation_.add_client_certificate("site-" + std::to_string(i));
    }
    federation_.start_server();
    subscription_ = federation_.call([this](FederationServer& s) {
      return s.subscribe_events([this](const store::EventRecord& e) { events_.add(e); });
    });
    for (int i = 1; i <= clients; ++i) {
      federation_.start_client("site-" + std::to_string(i), breast_cancer());
    }
    ASSERT_TRUE(federation_.wait_until([&] { return federation_.online() == clients; },
                                       std::chrono::seconds(30)));
  }

  void TearDown() override {
    federation_.call([this](FederationServer& s) {
      s.unsubscribe_events(subscription_);
      return 0;
    });
    federation_.stop();
  }

  bool waiting_for_admin() {
    return federation_.poll_server(
        [](FederationServer& s) { return s.status().waiting_for_admin; });
  }

  TempDir dir_;
  Federation federation_{dir_};
  EventLog events_;
  std::uint64_t subscription_ = 0;
};

constexpr const char* kManualRun =
    R"({"model":{"type":"logreg"},"rounds":2,"clients_per_round":2,"min_clients":2,
    "round_timeout_s":30,"seed":5,"optimizer":{"kind":"sgd","lr":0.01},"manual":true})";

TEST_F(ControlPlane, ManualRunAdvancesOnlyWhenAnAdminAsks) {
  start(2);
  auto run = federation_.start_run(kManualRun);
  ASSERT_TRUE(run) << run.error().to_string();
  ASSERT_TRUE(waiting_for_admin());
  EXPECT_EQ(federation_.rounds_committed(), 0);
  EXPECT_EQ(federation_.call([](FederationServer& s) { return s.status().active_run_id; }), *run);

  auto unknown = federation_.call([](FederationServer& s) { return s.advance_round(999); });
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, errc::not_found);

  auto first = federation_.call([&](FederationServer& s) { return s.advance_round(*run); });
  ASSERT_TRUE(first) << first.error().to_string();
  EXPECT_EQ(*first, 1);
  // Asked twice before the round is over: refused, not queued.
  auto again = federation_.call([&](FederationServer& s) { return s.advance_round(*run); });
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, errc::failed_precondition);

  ASSERT_TRUE(federation_.wait_until([&] { return federation_.rounds_committed() == 1; }));
  ASSERT_TRUE(waiting_for_admin());
  EXPECT_EQ(federation_.rounds_committed(), 1);  // it waits instead of going on
  EXPECT_FALSE(federation_.ended().has_value());

  auto second = federation_.call([&](FederationServer& s) { return s.advance_round(*run); });
  ASSERT_TRUE(second) << second.error().to_string();
  EXPECT_EQ(*second, 2);
  ASSERT_TRUE(federation_.wait_until([&] { return federation_.ended().has_value(); }));
  EXPECT_EQ(*federation_.ended(), store::RunState::finished);
  EXPECT_EQ(federation_.rounds_committed(), 2);
}

TEST_F(ControlPlane, AutomaticRunsRefuseRoundRequests) {
  start(1);
  auto run = federation_.start_run(
      R"({"model":{"type":"logreg"},"rounds":1,"min_clients":3,"wait_for_clients_s":60})");
  ASSERT_TRUE(run) << run.error().to_string();
  auto refused = federation_.call([&](FederationServer& s) { return s.advance_round(*run); });
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::failed_precondition);
  EXPECT_NE(refused.error().message.find("manual"), std::string::npos) << refused.error().message;
}

TEST_F(ControlPlane, StopEndsAWaitingRunAtOnceAndANewRunCanStart) {
  start(1);
  // Needs three clients; one is online, so the run waits for clients.
  auto run = federation_.start_run(
      R"({"model":{"type":"logreg"},"rounds":3,"min_clients":3,"wait_for_clients_s":120})");
  ASSERT_TRUE(run) << run.error().to_string();
  auto stopped = federation_.call([&](FederationServer& s) { return s.stop_run(*run); });
  ASSERT_TRUE(stopped) << stopped.error().to_string();
  // Recorded before stop_run returned.
  auto history = federation_.open_store();
  auto record = history.get_run(*run);
  ASSERT_TRUE(record);
  EXPECT_EQ(record->state, store::RunState::stopped);
  EXPECT_EQ(record->error, "stopped by an admin");
  ASSERT_TRUE(federation_.wait_until([&] { return federation_.ended().has_value(); }));
  EXPECT_EQ(*federation_.ended(), store::RunState::stopped);

  auto twice = federation_.call([&](FederationServer& s) { return s.stop_run(*run); });
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, errc::failed_precondition);
  auto missing = federation_.call([](FederationServer& s) { return s.stop_run(12345); });
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::not_found);

  ASSERT_TRUE(federation_.poll_server([](FederationServer& s) { return !s.run_active(); }));
  auto next = federation_.start_run(
      R"({"model":{"type":"logreg"},"rounds":1,"min_clients":1,"manual":true})");
  ASSERT_TRUE(next) << next.error().to_string();
  ASSERT_TRUE(waiting_for_admin());
  EXPECT_EQ(events_.count("run_ended"), 1u);
}

TEST_F(ControlPlane, StopWhileAManualRunWaitsRecordsNoRound) {
  start(2);
  auto run = federation_.start_run(kManualRun);
  ASSERT_TRUE(run) << run.error().to_string();
  ASSERT_TRUE(waiting_for_admin());
  ASSERT_TRUE(federation_.call([&](FederationServer& s) { return s.stop_run(*run); }));
  ASSERT_TRUE(federation_.poll_server([](FederationServer& s) { return !s.run_active(); }));
  auto history = federation_.open_store();
  auto rounds = history.list_rounds(*run);
  ASSERT_TRUE(rounds);
  EXPECT_TRUE(rounds->empty());
  EXPECT_EQ(history.get_run(*run)->state, store::RunState::stopped);
}

TEST_F(ControlPlane, EventFeedMatchesTheStoredEventsAndCountsTraffic) {
  start(2);
  auto sessions = federation_.call([](FederationServer& s) { return s.sessions(); });
  ASSERT_EQ(sessions.size(), 2u);
  EXPECT_EQ(sessions[0].client_id, "site-1");
  EXPECT_NE(sessions[0].peer.find("127.0.0.1:"), std::string::npos);
  EXPECT_GT(sessions[0].connected_ms, 0);
  EXPECT_FALSE(sessions[0].training);

  auto run = federation_.start_run(
      R"({"model":{"type":"logreg"},"rounds":2,"clients_per_round":2,"min_clients":2,
      "seed":2,"optimizer":{"kind":"sgd","lr":0.01}})");
  ASSERT_TRUE(run) << run.error().to_string();
  ASSERT_TRUE(federation_.wait_until([&] { return federation_.ended().has_value(); }));
  ASSERT_TRUE(federation_.poll_server([](FederationServer& s) { return !s.run_active(); }));
  const auto traffic = federation_.call([](FederationServer& s) { return s.traffic(); });
  // Two rounds of a 31-parameter model to two clients and back, plus framing.
  EXPECT_GT(traffic.bytes_out, 2u * 2u * 31u * sizeof(float));
  EXPECT_GT(traffic.bytes_in, 2u * 2u * 31u * sizeof(float));

  const auto seen = events_.snapshot();
  EXPECT_EQ(events_.count("round_started"), 2u);
  EXPECT_EQ(events_.count("update_accepted"), 4u);
  EXPECT_EQ(events_.count("round_committed"), 2u);
  EXPECT_EQ(events_.count("run_ended"), 1u);
  auto history = federation_.open_store();
  auto stored = history.list_events(0, 1000);
  ASSERT_TRUE(stored);
  ASSERT_EQ(stored->size(), seen.size());
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i], (*stored)[i]) << "event " << i;
  }
}

}  // namespace
}  // namespace fedcore
