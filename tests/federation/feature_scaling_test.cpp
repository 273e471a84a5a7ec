// The run's feature scale on the server: choose_feature_scaling, FeatureStatsCollection, and
// the run controller's exchange before the first round, driven by hand (a ManualClock,
// fake sessions, a real SQLite history in a temporary folder; no sockets, no sleeps).
#include "server/federation/feature_scaling.hpp"

#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/federation/run_controller.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::federation {
namespace {

using namespace std::chrono_literals;
using protocol::ScalingMode;

class FakeSessions final : public SessionDirectory {
 public:
  struct Sent {
    std::string client_id;
    protocol::MessageType type;
    std::string metadata;
  };
  std::vector<Candidate> online() const override { return clients; }
  void send_train(const std::string& client_id, std::string metadata,
                  std::shared_ptr<const std::vector<float>> global,
                  std::function<void()> /*written*/) override {
    auto request = protocol::parse_train_request(metadata);
    ASSERT_TRUE(request) << request.error().message;
    trains.push_back({client_id, *request, std::move(global)});
  }
  void send(const std::string& client_id, protocol::MessageType type, std::string metadata,
            std::shared_ptr<const std::vector<float>>) override {
    sent.push_back({client_id, type, std::move(metadata)});
  }
  void connect(const std::string& id, bool reports = true, std::vector<std::int64_t> shape = {2}) {
    clients.push_back({id, std::move(shape), 2, 100, reports});
  }
  void disconnect(const std::string& id) {
    std::erase_if(clients, [&](const Candidate& c) { return c.client_id == id; });
  }
  std::vector<Sent> requests() const {
    std::vector<Sent> out;
    std::copy_if(sent.begin(), sent.end(), std::back_inserter(out), [](const Sent& s) {
      return s.type == protocol::MessageType::feature_stats_request;
    });
    return out;
  }

  struct Train {
    std::string client_id;
    protocol::TrainRequest request;
    std::shared_ptr<const std::vector<float>> global;
  };
  std::vector<Candidate> clients;
  std::vector<Sent> sent;
  std::vector<Train> trains;
};

class CountingEntropy final : public Entropy {
 public:
  std::string nonce() override {
    auto digits = std::to_string(++count_);
    return std::string(32 - digits.size(), '0') + digits;
  }

 private:
  std::uint64_t count_ = 0;
};

class RecordedEvents final : public EventSink {
 public:
  void record(std::string_view kind, std::optional<std::int64_t>, std::optional<std::int64_t>,
              std::string_view client_id, std::string detail_json) override {
    events.push_back({std::string(kind), std::string(client_id), std::move(detail_json)});
  }
  std::vector<nlohmann::json> details(std::string_view kind) const {
    std::vector<nlohmann::json> out;
    for (const auto& e : events) {
      if (e.kind == kind) {
        out.push_back(nlohmann::json::parse(e.detail_json));
      }
    }
    return out;
  }
  struct Event {
    std::string kind;
    std::string client_id;
    std::string detail_json;
  };
  std::vector<Event> events;
};

// The base run, with `changes` merged over it.
RunConfig config(const nlohmann::json& changes = nlohmann::json::object()) {
  nlohmann::json j = {{"name", "t"},
                      {"model", {{"type", "logreg"}, {"input_shape", {2}}, {"num_classes", 2}}},
                      {"rounds", 2},
                      {"min_clients", 2},
                      {"round_timeout_s", 10},
                      {"wait_for_clients_s", 5}};
  j.update(changes);
  auto parsed = parse_run_config(j.dump());
  EXPECT_TRUE(parsed) << parsed.error().message;
  return *parsed;
}

// One site's report of two features: its values are given, so the pooled answer is known.
protocol::FeatureStatsReport report_of(const protocol::FeatureStatsRequest& request,
                                       const std::vector<std::pair<double, double>>& rows) {
  protocol::FeatureStatsReport r;
  r.run_id = request.run_id;
  r.nonce = request.nonce;
  r.features = request.features;
  r.count.assign(2, rows.size());
  r.sum.assign(2, 0.0);
  r.sum_squares.assign(2, 0.0);
  for (const auto& [x, y] : rows) {
    r.sum[0] += x;
    r.sum[1] += y;
    r.sum_squares[0] += x * x;
    r.sum_squares[1] += y * y;
  }
  return r;
}

protocol::Frame frame_of(const protocol::FeatureStatsReport& report) {
  return {protocol::MessageType::feature_stats, protocol::to_metadata(report), {}};
}

class FeatureScalingControllerTest : public ::testing::Test {
 protected:
  FeatureScalingControllerTest() : store_(open_store()) { make_controller(); }

  store::HistoryStore open_store() {
    auto store = store::HistoryStore::open(dir_.path("history.db"));
    EXPECT_TRUE(store) << store.error().message;
    return std::move(*store);
  }
  void make_controller() {
    ServerHooks hooks;
    hooks.run_ended = [this](std::int64_t, store::RunState state) { ended_.push_back(state); };
    controller_ = std::make_unique<RunController>(
        RunEnvironment{store_, sessions_, clock_, entropy_, events_, hooks, dir_.path("ckpt")});
  }
  void connect(const std::string& id, bool reports = true, std::vector<std::int64_t> shape = {2}) {
    sessions_.connect(id, reports, std::move(shape));
    store::ClientRecord record;
    record.id = id;
    record.online = true;
    ASSERT_TRUE(store_.upsert_client(record));
  }
  std::int64_t start(const RunConfig& c) {
    auto id = controller_->start_run(c);
    EXPECT_TRUE(id) << id.error().message;
    controller_->poll();
    return *id;
  }
  protocol::FeatureStatsRequest request_to(const std::string& id) {
    for (const auto& s : sessions_.requests()) {
      if (s.client_id == id) {
        auto parsed = protocol::parse_feature_stats_request(s.metadata);
        EXPECT_TRUE(parsed) << parsed.error().message;
        return *parsed;
      }
    }
    ADD_FAILURE() << id << " was not asked";
    return {};
  }
  void send_report(const std::string& id, const std::vector<std::pair<double, double>>& rows) {
    controller_->on_feature_stats(id, frame_of(report_of(request_to(id), rows)));
    controller_->poll();
  }

  testing::TempDir dir_;
  store::HistoryStore store_;
  ManualClock clock_;
  FakeSessions sessions_;
  CountingEntropy entropy_;
  RecordedEvents events_;
  std::unique_ptr<RunController> controller_;
  std::vector<store::RunState> ended_;
};

TEST(ChooseFeatureScaling, FollowsTheConfigTheInputAndThePrivacyTerms) {
  EXPECT_EQ(choose_feature_scaling(config(), {30}).mode, ScalingMode::federated);
  EXPECT_TRUE(choose_feature_scaling(config(), {30}).reason.empty());
  EXPECT_EQ(choose_feature_scaling(config(), {28, 28, 1}).mode, ScalingMode::none);
  auto site = config();
  site.feature_scaling = ScalingMode::site;
  EXPECT_EQ(choose_feature_scaling(site, {30}).mode, ScalingMode::site);
  auto none = config();
  none.feature_scaling = ScalingMode::none;
  EXPECT_EQ(choose_feature_scaling(none, {30}).mode, ScalingMode::none);
  auto secure =
      config({{"privacy", {{"secure_aggregation", nlohmann::json::object()}}}, {"min_clients", 3}});
  auto choice = choose_feature_scaling(secure, {30});
  EXPECT_EQ(choice.mode, ScalingMode::site);
  EXPECT_NE(choice.reason.find("secure aggregation or differential privacy"), std::string::npos);
  auto dp =
      config({{"privacy",
               {{"dp", {{"mode", "record"}, {"epsilon", 8}, {"delta", 1e-5}, {"clip_norm", 1}}}}},
              {"federated_evaluation", false}});
  EXPECT_EQ(choose_feature_scaling(dp, {30}).mode, ScalingMode::site);
  EXPECT_EQ(choose_feature_scaling(config(), {513}).mode, ScalingMode::site);
  EXPECT_EQ(choose_feature_scaling(config(), {512}).mode, ScalingMode::federated);
  // An external model's data is the sites' own code's to scale, whatever the run says.
  auto external = secure;
  external.model.type = model::ModelType::external;
  external.feature_scaling = ScalingMode::site;
  choice = choose_feature_scaling(external, {30});
  EXPECT_EQ(choice.mode, ScalingMode::none);
  EXPECT_NE(choice.reason.find("external model"), std::string::npos);
}

TEST(FeatureStatsCollectionTest, ChecksEveryReportBeforeKeepingIt) {
  FeatureStatsCollection c(7, 2, {{"a", std::string(32, '1')}, {"b", std::string(32, '2')}}, 2);
  EXPECT_EQ(c.request_for("a").nonce, std::string(32, '1'));
  EXPECT_EQ(c.request_for("b").features, 2u);
  auto good = report_of(c.request_for("a"), {{1, 2}, {3, 4}});

  auto other_run = good;
  other_run.run_id = 8;
  EXPECT_EQ(c.on_report("a", other_run).error().code, errc::invalid_argument);
  auto other_nonce = good;
  other_nonce.nonce = std::string(32, '2');  // b's nonce
  EXPECT_EQ(c.on_report("a", other_nonce).error().code, errc::invalid_argument);
  auto wider = good;
  wider.features = 3;
  EXPECT_EQ(c.on_report("a", wider).error().code, errc::invalid_argument);
  EXPECT_EQ(c.on_report("z", good).error().code, errc::failed_precondition);
  EXPECT_TRUE(c.is_waiting_for("a"));

  ASSERT_TRUE(c.on_report("a", good));
  EXPECT_EQ(c.on_report("a", good).error().code, errc::failed_precondition);  // a replay
  EXPECT_FALSE(c.on_no_answer("a"));
  EXPECT_FALSE(c.all_answered());
  auto short_of_quorum = c.combine();
  ASSERT_FALSE(short_of_quorum);
  EXPECT_EQ(short_of_quorum.error().code, errc::failed_precondition);
  EXPECT_NE(short_of_quorum.error().message.find("1 of 2 asked sites"), std::string::npos)
      << short_of_quorum.error().message;
  EXPECT_TRUE(c.on_no_answer("b"));
  EXPECT_TRUE(c.all_answered());
}

// Three capable sites; the combined scale is the pooled data's, stored with the run, and
// every TRAIN of the run carries exactly it, also to a site that joins later.
TEST_F(FeatureScalingControllerTest, CombinesTheSelectedSitesStoresTheScaleAndSendsItWithTrain) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  const auto run = start(config({{"clients_per_round", 2}, {"on_failed_round", "retry"}}));
  EXPECT_EQ(controller_->phase(), RunPhase::collecting_feature_stats);
  EXPECT_EQ(controller_->next_wakeup(), clock_.steady() + 10s);
  const auto asked = sessions_.requests();
  ASSERT_EQ(asked.size(), 2u);  // the clients round 1 selects
  EXPECT_TRUE(sessions_.trains.empty());
  // Site one holds {(1, 10), (3, 10)}, site two {(5, 10), (7, 10), (9, 10)}: pooled mean 5
  // and variance 8 for the first feature; the second is constant.
  send_report(asked[0].client_id, {{1, 10}, {3, 10}});
  EXPECT_EQ(controller_->phase(), RunPhase::collecting_feature_stats);
  send_report(asked[1].client_id, {{5, 10}, {7, 10}, {9, 10}});
  ASSERT_EQ(controller_->phase(), RunPhase::in_round);

  auto stored = store_.feature_scale(run);
  ASSERT_TRUE(stored && *stored);
  EXPECT_EQ((*stored)->mean, (std::vector<double>{5, 10}));
  EXPECT_NEAR((*stored)->stddev[0], std::sqrt(8.0), 1e-12);
  EXPECT_EQ((*stored)->stddev[1], 1.0);
  EXPECT_EQ((*stored)->sites, 2);
  EXPECT_EQ((*stored)->samples, 5);
  ASSERT_EQ(sessions_.trains.size(), 2u);
  for (const auto& t : sessions_.trains) {
    EXPECT_EQ(t.request.scaling.mode, ScalingMode::federated);
    EXPECT_EQ(t.request.scaling.mean, (*stored)->mean);
    EXPECT_EQ(t.request.scaling.stddev, (*stored)->stddev);
  }
  const auto told = events_.details("feature_scaling");
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0]["mode"], "federated");
  EXPECT_EQ(told[0]["sites"], 2);

  // Round 1 fails at its deadline (no update) and is retried with two sites that were
  // never asked: they train with the same scale, and nobody is asked again.
  for (auto id : {"a", "b", "c"}) {
    sessions_.disconnect(id);
  }
  connect("d");
  connect("e");
  clock_.advance(10s);
  controller_->poll();
  EXPECT_EQ(sessions_.requests().size(), 2u);
  ASSERT_EQ(sessions_.trains.size(), 4u);
  for (std::size_t i = 2; i < 4; ++i) {
    EXPECT_NE(sessions_.trains[i].client_id, "a");
    EXPECT_EQ(sessions_.trains[i].request.scaling.mean, (*stored)->mean);
    EXPECT_EQ(sessions_.trains[i].request.scaling.stddev, (*stored)->stddev);
  }
}

TEST_F(FeatureScalingControllerTest, TooFewReportsByTheDeadlinePauseTheRunAndStoreNothing) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  const auto run = start(config());
  ASSERT_EQ(sessions_.requests().size(), 3u);
  send_report("a", {{1, 2}});
  clock_.advance(10s - 1ms);
  controller_->poll();
  EXPECT_EQ(controller_->phase(), RunPhase::collecting_feature_stats);
  clock_.advance(1ms);
  controller_->poll();
  EXPECT_FALSE(controller_->run_active());
  EXPECT_EQ(ended_, std::vector{store::RunState::paused});
  const auto record = store_.get_run(run);
  ASSERT_TRUE(record);
  EXPECT_EQ(record->state, store::RunState::paused);
  EXPECT_EQ(record->error,
            "feature statistics: 1 of 3 asked sites reported feature statistics; 2 needed "
            "(min_clients)");
  EXPECT_FALSE(store_.feature_scale(run)->has_value());
  EXPECT_TRUE(sessions_.trains.empty());
}

// Refusals, lost sessions and bad reports are answers: the exchange ends without waiting
// for the deadline.
TEST_F(FeatureScalingControllerTest, RefusalsLostSessionsAndBadReportsCountAsAnswers) {
  for (auto id : {"a", "b", "c", "d"}) {
    connect(id);
  }
  const auto run = start(config({{"clients_per_round", 4}}));
  ASSERT_EQ(sessions_.requests().size(), 4u);
  controller_->on_client_error("a", "this site does not report feature statistics");
  controller_->on_session_lost("b", "connection reset");
  auto wrong = report_of(request_to("c"), {{1, 2}});
  wrong.features = 3;
  wrong.count.push_back(1);
  wrong.sum.push_back(0);
  wrong.sum_squares.push_back(0);
  controller_->on_feature_stats("c", frame_of(wrong));
  controller_->on_feature_stats("c", frame_of(report_of(request_to("c"), {{1, 2}})));  // too late
  const auto refused = events_.details("feature_stats_refused");
  ASSERT_EQ(refused.size(), 4u);
  EXPECT_EQ(refused[0]["reason"], "this site does not report feature statistics");
  EXPECT_EQ(refused[1]["reason"], "connection lost: connection reset");
  EXPECT_EQ(refused[2]["reason"], "the report has 3 features, the run's model 2");
  EXPECT_EQ(refused[3]["reason"],
            "this client has answered the feature statistics request already");
  controller_->poll();
  EXPECT_EQ(controller_->phase(), RunPhase::collecting_feature_stats);
  send_report("d", {{1, 2}, {3, 4}});  // the last answer: 1 report of the 2 needed
  EXPECT_FALSE(controller_->run_active());
  EXPECT_NE(store_.get_run(run)->error.find("1 of 4 asked sites"), std::string::npos);
}

// One site of round 1 does not announce the capability (an older daemon, which would train
// on the features as loaded): one scale for every site or none, so the run is unscaled and
// nobody is asked.
TEST_F(FeatureScalingControllerTest, AnOlderSiteInTheSelectionMeansNoScale) {
  connect("new");
  connect("old", false);
  start(config());
  EXPECT_TRUE(sessions_.requests().empty());
  ASSERT_EQ(sessions_.trains.size(), 2u);
  EXPECT_EQ(sessions_.trains[0].request.scaling.mode, ScalingMode::none);
  EXPECT_EQ(sessions_.trains[1].request.scaling.mode, ScalingMode::none);
  const auto told = events_.details("feature_scaling");
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0]["mode"], "none");
  EXPECT_EQ(told[0]["reason"],
            "1 of 2 selected sites cannot apply a feature scale (old); the run trains on the "
            "features as loaded");
}

TEST_F(FeatureScalingControllerTest, SecureAggregationFallsBackToSiteStatisticsWithoutAsking) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  start(config({{"privacy", {{"secure_aggregation", {{"bind_keys", false}}}}},
                {"min_clients", 3},
                {"federated_evaluation", false}}));
  EXPECT_TRUE(sessions_.requests().empty());
  ASSERT_EQ(sessions_.trains.size(), 3u);
  EXPECT_EQ(sessions_.trains[0].request.scaling.mode, ScalingMode::site);
  const auto told = events_.details("feature_scaling");
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0]["mode"], "site");
  EXPECT_NE(told[0]["reason"].get<std::string>().find("secure aggregation"), std::string::npos);
}

TEST_F(FeatureScalingControllerTest, ImagesAreNeverScaled) {
  connect("a", true, {28, 28, 1});
  connect("b", true, {28, 28, 1});
  auto images = parse_run_config(
      R"({"model":{"type":"mlp","hidden":[4],"input_shape":[28,28,1],"num_classes":2},)"
      R"("rounds":1,"min_clients":2,"wait_for_clients_s":5})");
  ASSERT_TRUE(images) << images.error().message;
  ASSERT_EQ(images->feature_scaling, ScalingMode::federated);  // the default
  start(*images);
  EXPECT_TRUE(sessions_.requests().empty());
  ASSERT_EQ(sessions_.trains.size(), 2u);
  EXPECT_EQ(sessions_.trains[0].request.scaling.mode, ScalingMode::none);
}

// A restarted server (a new controller over the same history) resumes the run with the
// stored scale and asks nobody again.
TEST_F(FeatureScalingControllerTest, AResumedRunReusesTheStoredScale) {
  for (auto id : {"a", "b"}) {
    connect(id);
  }
  const auto run = start(config());
  send_report("a", {{1, 2}, {3, 4}});
  send_report("b", {{5, 6}});
  ASSERT_EQ(controller_->phase(), RunPhase::in_round);
  const auto stored = **store_.feature_scale(run);
  controller_->shutdown();
  sessions_.sent.clear();
  sessions_.trains.clear();
  make_controller();
  ASSERT_TRUE(controller_->resume_runs());
  controller_->poll();
  EXPECT_TRUE(sessions_.requests().empty());
  ASSERT_EQ(sessions_.trains.size(), 2u);
  EXPECT_EQ(sessions_.trains[0].request.scaling.mean, stored.mean);
  EXPECT_EQ(sessions_.trains[1].request.scaling.stddev, stored.stddev);
  const auto told = events_.details("feature_scaling");
  ASSERT_EQ(told.size(), 2u);
  EXPECT_EQ(told[1]["stored"], true);
}

}  // namespace
}  // namespace fedcore::federation
