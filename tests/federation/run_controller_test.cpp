#include "server/federation/run_controller.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/federation/aggregate.hpp"
#include "shared/model/param_io.hpp"
#include "shared/privacy/distributed_dp.hpp"
#include "shared/privacy/rdp_accountant.hpp"
#include "shared/secagg/client.hpp"
#include "shared/secagg/wire.hpp"
#include "tests/temp_dir.hpp"

// The run controller driven by hand: a ManualClock, fake sessions that record the TRAIN
// frames they were asked to send, a counting nonce source, and a real SQLite history in a
// temporary folder. No sockets, no threads, no sleeps.
namespace fedcore::federation {
namespace {

using namespace std::chrono_literals;

class FakeSessions final : public SessionDirectory {
 public:
  struct Sent {
    std::string client_id;
    protocol::TrainRequest request;
    std::shared_ptr<const std::vector<float>> global;
    std::function<void()> written;  // the test calls it to say the frame left
  };

  std::vector<Candidate> online() const override { return clients; }
  void send_train(const std::string& client_id, std::string metadata,
                  std::shared_ptr<const std::vector<float>> global,
                  std::function<void()> written) override {
    auto request = protocol::parse_train_request(metadata);
    ASSERT_TRUE(request) << request.error().message;
    sent.push_back({client_id, *request, std::move(global), std::move(written)});
  }
  void send(const std::string& client_id, protocol::MessageType type, std::string metadata,
            std::shared_ptr<const std::vector<float>> payload) override {
    others.push_back({client_id, type, std::move(metadata), std::move(payload)});
  }
  struct Other {
    std::string client_id;
    protocol::MessageType type;
    std::string metadata;
    std::shared_ptr<const std::vector<float>> payload;
  };
  std::vector<Other> others;
  void connect(const std::string& id, std::uint64_t samples = 100) {
    clients.push_back({id, {4}, 2, samples, false});  // samples: as declared in its HELLO
  }
  void disconnect(const std::string& id) {
    std::erase_if(clients, [&](const Candidate& c) { return c.client_id == id; });
  }
  // The request sent to `id` in the latest round it was selected for.
  const Sent* last_sent_to(const std::string& id) const {
    for (auto it = sent.rbegin(); it != sent.rend(); ++it) {
      if (it->client_id == id) {
        return &*it;
      }
    }
    return nullptr;
  }

  std::vector<Candidate> clients;
  std::vector<Sent> sent;
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
  std::size_t count(std::string_view kind) const {
    return std::count_if(events.begin(), events.end(),
                         [&](const auto& e) { return e.kind == kind; });
  }
  struct Event {
    std::string kind;
    std::string client_id;
    std::string detail_json;
  };
  std::vector<Event> events;
};

constexpr auto kRoundTimeout = 10s;
constexpr auto kWaitForClients = 5s;

RunConfig config(std::string_view extra = "") {
  const std::string text =
      R"({"name":"t","model":{"type":"logreg","input_shape":[4],"num_classes":2},)"
      R"("rounds":2,"clients_per_round":3,"min_clients":2,"round_timeout_s":10,)"
      R"("wait_for_clients_s":5)" +
      std::string(extra) + "}";
  auto parsed = parse_run_config(text);
  EXPECT_TRUE(parsed) << parsed.error().message;
  return *parsed;
}

class RunControllerTest : public ::testing::Test {
 protected:
  RunControllerTest() : store_(open_store()) { make_controller(); }

  store::HistoryStore open_store() {
    auto store = store::HistoryStore::open(dir_.path("history.db"));
    EXPECT_TRUE(store) << store.error().message;
    return std::move(*store);
  }
  void make_controller() {
    ServerHooks hooks;
    hooks.round_committed = [this](std::int64_t, const store::RoundRecord& r) {
      committed_.push_back(r);
    };
    hooks.round_failed = [this](std::int64_t, const store::RoundRecord& r) {
      failed_.push_back(r);
    };
    hooks.run_ended = [this](std::int64_t, store::RunState state) { ended_.push_back(state); };
    RunEnvironment env{store_, sessions_, clock_, entropy_, events_, hooks, dir_.path("ckpt")};
    env.cpu_times = [this] { return cpu_; };
    controller_ = std::make_unique<RunController>(std::move(env));
  }

  // An update from `id` for the round it was last asked to train: the global model it
  // got, shifted by `delta`.
  void answer(const std::string& id, float delta, std::uint64_t samples = 10) {
    const auto* sent = sessions_.last_sent_to(id);
    ASSERT_NE(sent, nullptr) << id << " was never asked to train";
    answer_to(*sent, delta, samples);
  }
  void answer_to(const FakeSessions::Sent& sent_request, float delta, std::uint64_t samples = 10) {
    const auto* sent = &sent_request;
    const auto& id = sent->client_id;
    protocol::UpdateReport report;
    report.run_id = sent->request.run_id;
    report.round = sent->request.round;
    report.nonce = sent->request.nonce;
    report.layout_fingerprint = sent->request.layout_fingerprint;
    report.samples = samples;
    report.loss = 0.5;
    report.accuracy = 0.75;
    std::vector<float> params(*sent->global);
    for (auto& p : params) {
      p += delta;
    }
    controller_->on_update(id, report, params, 100);
    controller_->poll();
  }

  store::RunRecord run(std::int64_t id) {
    auto r = store_.get_run(id);
    EXPECT_TRUE(r) << r.error().message;
    return *r;
  }

  // A client with a live session, known to the history as the server's HELLO makes it.
  void connect(const std::string& id, std::uint64_t declared_samples = 100) {
    sessions_.connect(id, declared_samples);
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

  testing::TempDir dir_;
  store::HistoryStore store_;
  ManualClock clock_;
  FakeSessions sessions_;
  CountingEntropy entropy_;
  RecordedEvents events_;
  std::unique_ptr<RunController> controller_;
  std::vector<store::RoundRecord> committed_;
  std::vector<store::RoundRecord> failed_;
  std::vector<store::RunState> ended_;
  CpuTimes cpu_;  // what the controller reads as the server's CPU time
};

TEST(RoundStage, TheTableAllowsOnlyTheProtocolsMoves) {
  using enum RoundStage;
  using enum RoundEvent;
  EXPECT_EQ(next_stage(selecting, clients_selected), training);
  EXPECT_EQ(next_stage(training, requests_sent), collecting);
  EXPECT_EQ(next_stage(collecting, all_answered), aggregating);
  EXPECT_EQ(next_stage(collecting, deadline_passed), aggregating);
  EXPECT_EQ(next_stage(aggregating, aggregated), committing);
  EXPECT_EQ(next_stage(aggregating, quorum_missed), failed);
  EXPECT_EQ(next_stage(committing, committed), done);
  EXPECT_EQ(next_stage(committing, commit_failed), failed);
  EXPECT_EQ(next_stage(committing, handed_off), persisting);
  EXPECT_EQ(next_stage(persisting, committed), done);
  EXPECT_EQ(next_stage(persisting, commit_failed), failed);
  EXPECT_EQ(next_stage(persisting, handed_off), std::nullopt);
  EXPECT_EQ(next_stage(persisting, abandoned), std::nullopt);
  EXPECT_EQ(next_stage(aggregating, handed_off), std::nullopt);
  EXPECT_EQ(next_stage(collecting, abandoned), failed);
  // Secure aggregation's stages, the consistency check between masking and unmasking.
  EXPECT_EQ(next_stage(masking, inputs_collected), consistency);
  EXPECT_EQ(next_stage(consistency, survivors_signed), unmasking);
  EXPECT_EQ(next_stage(consistency, below_threshold), failed);
  EXPECT_EQ(next_stage(masking, unmasked), std::nullopt);
  EXPECT_EQ(round_stage_name(consistency), "consistency");
  EXPECT_EQ(next_stage(selecting, all_answered), std::nullopt);
  EXPECT_EQ(next_stage(collecting, committed), std::nullopt);
  EXPECT_EQ(next_stage(done, abandoned), std::nullopt);
  EXPECT_EQ(next_stage(failed, abandoned), std::nullopt);
  EXPECT_TRUE(is_final(done));
  EXPECT_FALSE(is_final(collecting));
  EXPECT_EQ(round_stage_name(aggregating), "aggregating");
}

TEST_F(RunControllerTest, AFullRoundCommitsTheWeightedMeanAndItsCheckpoint) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  const auto id = start(config());
  ASSERT_EQ(controller_->round_stage(), RoundStage::collecting);
  ASSERT_EQ(sessions_.sent.size(), 3u);
  const auto global = *sessions_.sent[0].global;
  answer("a", 1.0f, 10);
  answer("b", 2.0f, 30);
  EXPECT_EQ(controller_->round_stage(), RoundStage::collecting);
  EXPECT_TRUE(controller_->is_training("c"));
  answer("c", 4.0f, 60);
  ASSERT_EQ(committed_.size(), 1u);
  EXPECT_EQ(committed_[0].accepted, 3);
  EXPECT_EQ(run(id).last_round, 1);
  // Round 2 started at once with the new global: global + (10*1 + 30*2 + 60*4) / 100.
  ASSERT_EQ(sessions_.sent.size(), 6u);
  const auto& next = *sessions_.sent[3].global;
  for (std::size_t i = 0; i < next.size(); ++i) {
    EXPECT_NEAR(next[i], global[i] + 3.1f, 1e-5f);
  }
  auto checkpoint = store_.latest_checkpoint(id);
  ASSERT_TRUE(checkpoint && *checkpoint);
  auto bundle = model::load_params((*checkpoint)->ref.path);
  ASSERT_TRUE(bundle) << bundle.error().message;
  EXPECT_EQ(bundle->params, next);
  // Every selected client got its own nonce.
  EXPECT_NE(sessions_.sent[3].request.nonce, sessions_.sent[4].request.nonce);
  for (auto c : {"a", "b", "c"}) {
    answer(c, 0.0f);
  }
  EXPECT_EQ(run(id).state, store::RunState::finished);
  EXPECT_EQ(ended_, std::vector{store::RunState::finished});
  EXPECT_FALSE(controller_->run_active());
}

// Each attempt records where its time went, on the injected clock and CPU source, and
// its own event commits with it.
TEST_F(RunControllerTest, EachRoundRecordsItsPhasesAndCpuTimeFromTheInjectedClocks) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  cpu_ = {1.0, 0.5};
  const auto id = start(config());
  ASSERT_EQ(sessions_.sent.size(), 3u);
  clock_.advance(1500ms);
  for (const auto& sent : sessions_.sent) {
    ASSERT_TRUE(sent.written) << "every TRAIN carries its written callback";
  }
  sessions_.sent[0].written();
  clock_.advance(500ms);
  sessions_.sent[1].written();
  sessions_.sent[2].written();  // the last frame left at 2 s
  clock_.advance(3s);
  answer("a", 1.0f);
  clock_.advance(1s);
  answer("b", 1.0f);
  clock_.advance(1s);
  cpu_ = {1.25, 0.875};
  answer("c", 1.0f);
  ASSERT_EQ(committed_.size(), 1u);

  // Round 2 has begun; a TRAIN of round 1 reported late changes nothing.
  sessions_.sent[0].written();
  auto phases = store_.list_round_phases(id);
  ASSERT_TRUE(phases) << phases.error().message;
  ASSERT_EQ(phases->size(), 1u);
  const auto& p = (*phases)[0];
  EXPECT_EQ(p.round, 1);
  EXPECT_EQ(p.attempt, 1);
  EXPECT_EQ(p.requests_queued_ms, 0.0);
  EXPECT_EQ(p.train_written_ms, 2000.0);
  EXPECT_EQ(p.first_update_ms, 5000.0);
  EXPECT_EQ(p.last_update_ms, 7000.0);
  EXPECT_EQ(p.closed_ms, 7000.0);  // the last update closed it
  EXPECT_EQ(p.total_ms, 7000.0);
  EXPECT_EQ(p.cpu_user_ms, 250.0);
  EXPECT_EQ(p.cpu_system_ms, 375.0);
  EXPECT_EQ(p.federated_evaluation_ms, 0.0) << "its evaluation stage found no evaluator";

  // The round's committed event was written in the round's transaction and announced once.
  EXPECT_EQ(events_.count("round_committed"), 1u);
  auto stored = store_.list_events(0, 1000);
  ASSERT_TRUE(stored);
  const auto committed_event = std::find_if(
      stored->begin(), stored->end(), [](const auto& e) { return e.kind == "round_committed"; });
  ASSERT_NE(committed_event, stored->end());
  EXPECT_EQ(committed_event->round, 1);
  EXPECT_EQ(nlohmann::json::parse(committed_event->detail_json)["accepted"], 3);

  // A frame written after the controller is gone finds nothing to call.
  const auto late = sessions_.sent[3].written;
  controller_.reset();
  late();
}

// Over-selection: 5 selected for 3 needed; the round closes the moment the third update is
// accepted (no clock moves), the two still training are late, are not asked again while
// busy, and their updates, when they come, change nothing.
TEST_F(RunControllerTest, OverSelectionClosesWithTheUpdatesItNeedsAndTheRestAreLate) {
  for (auto id : {"a", "b", "c", "d", "e"}) {
    connect(id);
  }
  auto three_rounds = config(R"(,"over_selection":2)");
  three_rounds.rounds = 3;
  const auto id = start(three_rounds);
  ASSERT_EQ(sessions_.sent.size(), 5u) << "3 needed + 2 over-selected";
  const auto global = *sessions_.sent[0].global;
  const auto first = sessions_.sent;  // round 1's requests
  answer_to(first[0], 1.0f, 10);
  answer_to(first[1], 2.0f, 30);
  EXPECT_EQ(controller_->round_stage(), RoundStage::collecting);
  answer_to(first[2], 4.0f, 60);
  ASSERT_EQ(committed_.size(), 1u) << "the round closes with its third update, before any deadline";
  EXPECT_EQ(committed_[0].accepted, 3);
  EXPECT_EQ(committed_[0].late, 2);
  EXPECT_EQ(committed_[0].timed_out, 0);
  auto results = store_.list_client_results(id, 1);
  ASSERT_TRUE(results) << results.error().message;
  for (const auto& r : *results) {
    const bool answered = r.client_id == first[0].client_id || r.client_id == first[1].client_id ||
                          r.client_id == first[2].client_id;
    EXPECT_EQ(r.status, answered ? store::ResultStatus::ok : store::ResultStatus::late)
        << r.client_id;
    if (!answered) {
      EXPECT_NE(r.reason.find("over-selection"), std::string::npos) << r.reason;
    }
  }
  // Round 2 asks only the three that are free: the late two are still training.
  ASSERT_EQ(sessions_.sent.size(), 8u);
  std::set<std::string> second;
  for (std::size_t i = 5; i < 8; ++i) {
    second.insert(sessions_.sent[i].client_id);
    EXPECT_NEAR((*sessions_.sent[i].global)[0], global[0] + 3.1f, 1e-5f);
  }
  EXPECT_FALSE(second.contains(first[3].client_id));
  EXPECT_FALSE(second.contains(first[4].client_id));

  // A late update arrives: stale, the model is untouched, and its site is free again.
  const auto stale_before = events_.count("update_stale");
  answer_to(first[3], 100.0f, 10);
  EXPECT_EQ(events_.count("update_stale"), stale_before + 1);
  for (std::size_t i = 5; i < 8; ++i) {
    answer_to(sessions_.sent[i], 0.0f);
  }
  ASSERT_EQ(committed_.size(), 2u);
  EXPECT_EQ(committed_[1].late, 0) << "no one over-selected was left: 3 free + 1 back = 4 asked";
  ASSERT_EQ(sessions_.sent.size(), 12u) << "round 3 asks the 3 free and the one that answered";
  for (std::size_t i = 8; i < 12; ++i) {
    EXPECT_NE(sessions_.sent[i].client_id, first[4].client_id) << "still training for round 1";
    EXPECT_NEAR((*sessions_.sent[i].global)[0], global[0] + 3.1f, 1e-5f)
        << "the late update changed nothing";
  }
}

// Sample counts weigh updates: each is bounded by the client's HELLO and by the run's cap.
// Weighted client sampling (run_config.hpp): draws with replacement in proportion to the
// declared samples. With 1, 1 and 98 samples and 3 draws a round, the large site takes part
// in every round and each small one in about 3% of them; a round that drew only the large
// site still reaches its quorum (at most the distinct sites drawn).
TEST_F(RunControllerTest, WeightedSamplingDrawsSitesInProportionToTheirSamples) {
  connect("a", 1);
  connect("b", 1);
  connect("c", 98);
  auto many = config(R"(,"client_sampling":"weighted")");
  many.rounds = 100;
  const auto id = start(many);
  std::map<std::string, int> rounds_in;
  std::size_t answered = 0;
  for (int r = 0; r < 100 && answered < sessions_.sent.size(); ++r) {
    const auto requests =
        std::vector(sessions_.sent.begin() + static_cast<long>(answered), sessions_.sent.end());
    answered = sessions_.sent.size();
    for (const auto& request : requests) {
      ++rounds_in[request.client_id];
      answer_to(request, 0.0f, request.client_id == "c" ? 98 : 1);
    }
  }
  EXPECT_EQ(run(id).state, store::RunState::finished);
  EXPECT_EQ(committed_.size(), 100u);
  EXPECT_TRUE(failed_.empty());
  EXPECT_EQ(rounds_in["c"], 100);
  EXPECT_GE(rounds_in["a"] + rounds_in["b"], 1);
  EXPECT_LE(rounds_in["a"] + rounds_in["b"], 15);  // about 6 expected
}

TEST_F(RunControllerTest, SampleCountsAreBoundedByTheHelloAndTheRunsCap) {
  connect("a", 100);
  connect("b", 100);
  connect("c", 50);
  const auto id = start(config(R"(,"max_samples_per_client":60)"));
  ASSERT_EQ(controller_->round_stage(), RoundStage::collecting);
  const auto global = *sessions_.sent[0].global;
  answer("a", 1.0f, 10);
  answer("b", 2.0f, 100);               // weighs 60, the cap
  answer("c", 1000.0f, 4'000'000'000);  // declared 50: rejected
  ASSERT_EQ(committed_.size(), 1u);
  EXPECT_EQ(committed_[0].accepted, 2);
  EXPECT_EQ(committed_[0].rejected, 1);
  // global + (10 * 1 + 60 * 2) / 70
  const auto& next = *sessions_.sent[3].global;
  for (std::size_t i = 0; i < next.size(); ++i) {
    EXPECT_NEAR(next[i], global[i] + 130.0f / 70.0f, 1e-5f);
  }
  const auto rejected = std::find_if(events_.events.begin(), events_.events.end(),
                                     [](const auto& e) { return e.kind == "update_rejected"; });
  ASSERT_NE(rejected, events_.events.end());
  EXPECT_EQ(rejected->client_id, "c");
  EXPECT_EQ(nlohmann::json::parse(rejected->detail_json)["reason_code"], "samples_above_declared");
  auto results = store_.list_client_results(id, 1);
  ASSERT_TRUE(results) << results.error().message;
  bool found = false;
  for (const auto& r : *results) {
    if (r.client_id == "c") {
      found = true;
      EXPECT_EQ(r.status, store::ResultStatus::rejected);
      EXPECT_EQ(r.reason, "update claims 4000000000 samples; the client declared 50 at HELLO");
    }
  }
  EXPECT_TRUE(found);
}

// The exact sum holds 2^46 of weight in a round (fixed_point_mean.hpp). 16,400 sites that
// each declare the protocol's most (2^40 samples) and claim the most one update may
// (2^32) would bring more: the round weighs each at most an equal share of the range
// instead of failing, so it commits with the plain mean of their deltas.
TEST_F(RunControllerTest, SitesClaimingMoreWeightThanTheExactSumHoldsWeighEqualShares) {
  constexpr std::uint64_t kDeclared = std::uint64_t{1} << 40;
  constexpr std::uint64_t kClaimed = std::uint64_t{1} << 32;
  constexpr int kSites = 16400;
  for (int c = 0; c < kSites; ++c) {
    connect("s" + std::to_string(c), kDeclared);
  }
  auto parsed = parse_run_config(
      R"({"name":"t","model":{"type":"logreg","input_shape":[4],"num_classes":2},)"
      R"("rounds":1,"clients_per_round":16400,"min_clients":16400,"round_timeout_s":10,)"
      R"("wait_for_clients_s":5})");
  ASSERT_TRUE(parsed) << parsed.error().message;
  const auto id = start(*parsed);
  ASSERT_EQ(controller_->round_stage(), RoundStage::collecting);
  const auto global = *sessions_.sent[0].global;
  const auto quiet = spdlog::get_level();
  spdlog::set_level(spdlog::level::warn);  // 16,400 "accepted" lines say nothing here
  for (int c = 0; c < kSites; ++c) {
    answer("s" + std::to_string(c), c % 2 == 0 ? 1.0f : 3.0f, kClaimed);
  }
  spdlog::set_level(quiet);
  ASSERT_EQ(committed_.size(), 1u);
  EXPECT_EQ(committed_[0].accepted, kSites);
  const auto checkpoint = store_.latest_checkpoint(id);
  ASSERT_TRUE(checkpoint && checkpoint->has_value());
  const auto loaded = model::load_params((*checkpoint)->ref.path);
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  for (std::size_t i = 0; i < global.size(); ++i) {
    EXPECT_NEAR(loaded->params[i], global[i] + 2.0f, 1e-5f);  // half 1, half 3
  }
}

// A site whose policy refuses the run answers with an ERROR (client/session.cpp); the
// server stores the site's words as that client's result for the round.
TEST_F(RunControllerTest, ASitePolicyRefusalIsStoredAsTheClientsAnswerInItsWords) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  const auto id = start(config());
  const std::string words = "site policy: model type 'logreg' is not allowed (allowed: mlp)";
  controller_->on_client_error("c", words);
  controller_->poll();
  answer("a", 1.0f);
  answer("b", 1.0f);
  ASSERT_EQ(committed_.size(), 1u);  // everyone answered: no wait for the deadline
  EXPECT_EQ(committed_[0].dropped, 1);
  auto results = store_.list_client_results(id, 1);
  ASSERT_TRUE(results) << results.error().message;
  const auto c = std::find_if(results->begin(), results->end(),
                              [](const auto& r) { return r.client_id == "c"; });
  ASSERT_NE(c, results->end());
  EXPECT_EQ(c->status, store::ResultStatus::dropped);
  EXPECT_EQ(c->reason, "could not train: " + words);
}

TEST_F(RunControllerTest, QuorumAtTheDeadlineCommitsAndTheSilentClientTimesOut) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  const auto id = start(config());
  answer("a", 1.0f);
  answer("b", 1.0f);
  ASSERT_EQ(controller_->next_wakeup(), clock_.steady() + kRoundTimeout);
  clock_.advance(kRoundTimeout - 1ms);
  controller_->poll();
  EXPECT_EQ(controller_->round_stage(), RoundStage::collecting);
  EXPECT_TRUE(committed_.empty());
  clock_.advance(1ms);
  controller_->poll();
  ASSERT_EQ(committed_.size(), 1u);
  EXPECT_EQ(committed_[0].accepted, 2);
  EXPECT_EQ(committed_[0].timed_out, 1);
  auto results = store_.list_client_results(id, 1);
  ASSERT_TRUE(results);
  ASSERT_EQ(results->size(), 3u);
  EXPECT_EQ((*results)[2].client_id, "c");
  EXPECT_EQ((*results)[2].status, store::ResultStatus::timeout);
}

TEST_F(RunControllerTest, ALateUpdateIsStaleAndChangesNothing) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  const auto id =
      start(config(","
                   R"("manual":true)"));
  ASSERT_EQ(controller_->phase(), RunPhase::waiting_for_admin);
  ASSERT_TRUE(controller_->advance_round(id));
  controller_->poll();
  answer("a", 1.0f);
  answer("b", 1.0f);
  clock_.advance(kRoundTimeout);
  controller_->poll();
  ASSERT_EQ(committed_.size(), 1u);
  ASSERT_EQ(controller_->phase(), RunPhase::waiting_for_admin);
  const auto round1_request = *sessions_.last_sent_to("c");
  answer("c", 100.0f);  // round 1 is over: nothing to fold it into
  EXPECT_EQ(events_.count("update_stale"), 1u);
  EXPECT_EQ(run(id).last_round, 1);
  ASSERT_TRUE(controller_->advance_round(id));
  controller_->poll();
  ASSERT_EQ(controller_->active_round(), 2);
  answer_to(round1_request, 100.0f);  // names round 1 while round 2 is collecting
  EXPECT_EQ(events_.count("update_stale"), 2u);
  // The late update answered nothing: c is still expected in round 2.
  EXPECT_TRUE(controller_->is_training("c"));
  EXPECT_EQ(events_.count("update_accepted"), 2u);
}

TEST_F(RunControllerTest, ASessionLostMidUploadAnswersTheRoundAsDropped) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  const auto id = start(config());
  answer("a", 1.0f);
  answer("b", 1.0f);
  sessions_.disconnect("c");
  controller_->on_session_lost("c", "read deadline passed");
  controller_->poll();
  // Everyone answered: the round closes without waiting for its deadline.
  ASSERT_EQ(committed_.size(), 1u);
  EXPECT_EQ(committed_[0].dropped, 1);
  auto results = store_.list_client_results(id, 1);
  ASSERT_TRUE(results);
  EXPECT_EQ((*results)[2].status, store::ResultStatus::dropped);
  EXPECT_EQ((*results)[2].reason, "connection lost: read deadline passed");
}

TEST_F(RunControllerTest, NoQuorumRecordsAFailedRoundAndPausesTheRunWithTheReason) {
  connect("a");
  connect("b");
  const auto id = start(config());
  answer("a", 1.0f);
  clock_.advance(kRoundTimeout);
  controller_->poll();
  ASSERT_EQ(failed_.size(), 1u);
  EXPECT_FALSE(controller_->run_active());
  const auto stored = run(id);
  EXPECT_EQ(stored.state, store::RunState::paused);
  EXPECT_NE(stored.error.find("round 1 failed"), std::string::npos) << stored.error;
  EXPECT_EQ(stored.last_round, 0);
  // The failed attempt has its phases (no checkpoint, no commit) and its stored event.
  auto phases = store_.list_round_phases(id);
  ASSERT_TRUE(phases && phases->size() == 1u);
  EXPECT_EQ((*phases)[0].total_ms, 10000.0);
  EXPECT_EQ((*phases)[0].first_update_ms, 0.0);
  EXPECT_EQ((*phases)[0].checkpoint_ms, 0.0);
  EXPECT_EQ(events_.count("round_failed"), 1u);
  auto events = store_.list_events(0, 1000);
  ASSERT_TRUE(events);
  EXPECT_EQ(std::count_if(events->begin(), events->end(),
                          [](const auto& e) { return e.kind == "round_failed"; }),
            1);
}

TEST_F(RunControllerTest, TheFailedRoundHookRunsBeforeTheRunEndsAndMayStopIt) {
  connect("a");
  connect("b");
  const auto id =
      start(config(","
                   R"("on_failed_round":"retry","max_retries":3)"));
  std::vector<std::string> order;
  ServerHooks hooks;
  hooks.round_failed = [&](std::int64_t run_id, const store::RoundRecord&) {
    order.push_back("round_failed");
    ASSERT_TRUE(controller_->stop_run(run_id));  // from inside the hook
  };
  hooks.run_ended = [&](std::int64_t, store::RunState) { order.push_back("run_ended"); };
  // A controller over the same store resumes the run with these hooks.
  controller_->shutdown();
  controller_ = std::make_unique<RunController>(
      RunEnvironment{store_, sessions_, clock_, entropy_, events_, hooks, dir_.path("ckpt")});
  ASSERT_TRUE(controller_->resume_runs());
  controller_->poll();
  clock_.advance(kRoundTimeout);
  controller_->poll();
  EXPECT_EQ(order, (std::vector<std::string>{"round_failed", "run_ended"}));
  EXPECT_FALSE(controller_->run_active());
  EXPECT_EQ(run(id).state, store::RunState::stopped);
}

TEST_F(RunControllerTest, RetryPolicyRunsTheRoundAgainWithAFreshSample) {
  connect("a");
  connect("b");
  const auto id =
      start(config(","
                   R"("on_failed_round":"retry","max_retries":1)"));
  clock_.advance(kRoundTimeout);
  controller_->poll();
  ASSERT_EQ(failed_.size(), 1u);
  ASSERT_EQ(controller_->round_stage(), RoundStage::collecting);  // attempt 2 of round 1
  EXPECT_EQ(controller_->active_round(), 1);
  answer("a", 1.0f);
  answer("b", 1.0f);
  ASSERT_EQ(committed_.size(), 1u);
  EXPECT_EQ(run(id).last_round, 1);
}

TEST_F(RunControllerTest, TooFewClientsPauseTheRunWhenTheWaitEnds) {
  connect("a");
  const auto id = start(config());
  EXPECT_EQ(controller_->phase(), RunPhase::waiting_for_clients);
  EXPECT_EQ(controller_->next_wakeup(), clock_.steady() + kWaitForClients);
  clock_.advance(kWaitForClients);
  controller_->poll();
  EXPECT_EQ(run(id).state, store::RunState::paused);
  EXPECT_NE(run(id).error.find("fewer than 2 clients"), std::string::npos) << run(id).error;
}

TEST_F(RunControllerTest, AClientComingOnlineStartsTheWaitingRound) {
  connect("a");
  start(config());
  connect("b");
  controller_->poll();
  EXPECT_EQ(controller_->round_stage(), RoundStage::collecting);
  EXPECT_EQ(sessions_.sent.size(), 2u);
}

TEST_F(RunControllerTest, ARoundWaitsForItsMinimumOfAvailableClientsNotJustTheQuorum) {
  connect("a");
  connect("b");
  start(config(R"(,"min_available_clients":3)"));
  controller_->poll();
  EXPECT_EQ(controller_->phase(), RunPhase::waiting_for_clients) << "2 online meet the quorum only";
  EXPECT_TRUE(sessions_.sent.empty());
  connect("c");
  controller_->poll();
  EXPECT_EQ(controller_->round_stage(), RoundStage::collecting);
  EXPECT_EQ(sessions_.sent.size(), 3u);
}

TEST_F(RunControllerTest, PauseDuringARoundStoresNothingOfItAndResumeRedoesIt) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  const auto id = start(config());
  answer("a", 1.0f);
  ASSERT_TRUE(controller_->pause_run(id));
  EXPECT_FALSE(controller_->run_active());
  EXPECT_EQ(run(id).state, store::RunState::paused);
  EXPECT_EQ(run(id).error, "paused by an admin");
  auto rounds = store_.list_rounds(id);
  ASSERT_TRUE(rounds);
  EXPECT_TRUE(rounds->empty());
  answer("b", 1.0f);  // the abandoned round's update is stale
  EXPECT_EQ(events_.count("update_stale"), 1u);

  ASSERT_TRUE(controller_->resume_run(id));
  controller_->poll();
  EXPECT_EQ(controller_->active_round(), 1);
  for (auto c : {"a", "b", "c"}) {
    answer(c, 1.0f);
  }
  EXPECT_EQ(run(id).last_round, 1);
  auto again = controller_->resume_run(id);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, errc::failed_precondition);
}

TEST_F(RunControllerTest, StopAbandonsTheRoundAndANewRunCanStartAtOnce) {
  for (auto id : {"a", "b"}) {
    connect(id);
  }
  const auto first = start(config());
  ASSERT_TRUE(controller_->stop_run(first));
  EXPECT_EQ(run(first).state, store::RunState::stopped);
  auto rounds = store_.list_rounds(first);
  ASSERT_TRUE(rounds);
  EXPECT_TRUE(rounds->empty());
  const auto second = start(config());
  EXPECT_EQ(controller_->active_run_id(), second);
  auto again = controller_->stop_run(first);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, errc::failed_precondition);
}

TEST_F(RunControllerTest, RestartFromTheStoreResumesAfterTheLastCommittedRound) {
  for (auto id : {"a", "b"}) {
    connect(id);
  }
  const auto id = start(config());
  answer("a", 1.0f);
  answer("b", 1.0f);
  ASSERT_EQ(committed_.size(), 1u);
  const auto round2_global = *sessions_.sent.back().global;
  // The server dies in round 2; a new controller over the same store takes over.
  controller_->shutdown();
  EXPECT_EQ(run(id).state, store::RunState::running);
  sessions_.sent.clear();
  make_controller();
  ASSERT_TRUE(controller_->resume_runs());
  controller_->poll();
  EXPECT_EQ(controller_->active_round(), 2);
  ASSERT_EQ(sessions_.sent.size(), 2u);
  EXPECT_EQ(*sessions_.sent[0].global, round2_global);  // from the round-1 checkpoint
  answer("a", 1.0f);
  answer("b", 1.0f);
  EXPECT_EQ(run(id).state, store::RunState::finished);
  EXPECT_EQ(run(id).last_round, 2);
}

// A server optimizer's moments survive a restart: the run resumed after round 2 takes
// round 3's step from the state saved with round 2, exactly as an uninterrupted strategy
// does; only the last committed round's state file is kept.
TEST_F(RunControllerTest, FedAdamsMomentsSurviveARestartWithTheRoundsCheckpoint) {
  for (auto id : {"a", "b"}) {
    connect(id);
  }
  auto c = config(R"(,"strategy":"fedadam","strategy_options":{"server_lr":0.05})");
  c.rounds = 3;
  const auto id = start(c);
  const auto initial = *sessions_.sent[0].global;
  const float deltas[] = {1.0f, -0.5f, 0.25f};
  for (int r = 0; r < 2; ++r) {
    answer("a", deltas[r]);
    answer("b", deltas[r]);
  }
  ASSERT_EQ(committed_.size(), 2u);
  const auto run_dir = std::filesystem::path(dir_.path("ckpt")) / ("run-" + std::to_string(id));
  EXPECT_FALSE(std::filesystem::exists(run_dir / "round-1.state.fcp"));
  EXPECT_TRUE(std::filesystem::exists(run_dir / "round-2.state.fcp"));
  controller_->shutdown();
  sessions_.sent.clear();
  make_controller();
  ASSERT_TRUE(controller_->resume_runs());
  controller_->poll();
  ASSERT_EQ(controller_->active_round(), 3);
  answer("a", deltas[2]);
  answer("b", deltas[2]);
  ASSERT_EQ(run(id).state, store::RunState::finished);

  // The same three rounds through one strategy that never stopped.
  auto uninterrupted = make_strategy(c.strategy_config, initial.size());
  ASSERT_TRUE(uninterrupted);
  std::vector<float> x = initial;
  for (float delta : deltas) {
    std::vector<float> update(x);
    for (auto& v : update) {
      v += delta;
    }
    (*uninterrupted)->begin_round(x, 20);
    (*uninterrupted)->add_update(update, 10);
    (*uninterrupted)->add_update(update, 10);
    x = (*uninterrupted)->finish_round();
  }
  auto checkpoint = store_.latest_checkpoint(id);
  ASSERT_TRUE(checkpoint && *checkpoint);
  auto bundle = model::load_params((*checkpoint)->ref.path);
  ASSERT_TRUE(bundle) << bundle.error().message;
  EXPECT_EQ(bundle->params, x);
  EXPECT_FALSE(std::filesystem::exists(run_dir / "round-2.state.fcp"));
  EXPECT_TRUE(std::filesystem::exists(run_dir / "round-3.state.fcp"));
}

// Without its state file a FedAdam run cannot resume as it was; it fails saying so rather
// than restarting its moments from zero behind the operator's back.
TEST_F(RunControllerTest, AServerOptimizerRunWithoutItsStateFileFailsToResumeSayingWhy) {
  for (auto id : {"a", "b"}) {
    connect(id);
  }
  auto c = config(R"(,"strategy":"fedyogi")");
  c.rounds = 3;
  const auto id = start(c);
  answer("a", 1.0f);
  answer("b", 1.0f);
  ASSERT_EQ(committed_.size(), 1u);
  controller_->shutdown();
  const auto run_dir = std::filesystem::path(dir_.path("ckpt")) / ("run-" + std::to_string(id));
  ASSERT_TRUE(std::filesystem::remove(run_dir / "round-1.state.fcp"));
  make_controller();
  ASSERT_TRUE(controller_->resume_runs());
  controller_->poll();
  EXPECT_EQ(run(id).state, store::RunState::failed);
  EXPECT_NE(run(id).error.find("cannot resume strategy fedyogi after round 1: no strategy state "
                               "file"),
            std::string::npos)
      << run(id).error;
}

TEST_F(RunControllerTest, ARunThatCannotPrepareFailsWithItsReasonInStoreEventAndHook) {
  connect("a");
  connect("b");
  const auto id =
      start(config(","
                   R"("server_test_set":"/nonexistent/test.csv")"));
  EXPECT_FALSE(controller_->run_active());
  const auto stored = run(id);
  EXPECT_EQ(stored.state, store::RunState::failed);
  EXPECT_NE(stored.error.find("server test set"), std::string::npos) << stored.error;
  EXPECT_EQ(ended_, std::vector{store::RunState::failed});
  ASSERT_EQ(events_.count("run_ended"), 1u);
  EXPECT_NE(events_.events.back().detail_json.find("server test set"), std::string::npos);
}

TEST_F(RunControllerTest, FailActiveRunRecordsTheInternalError) {
  connect("a");
  connect("b");
  const auto id = start(config());
  controller_->fail_active_run("internal error while driving the run: boom");
  EXPECT_EQ(run(id).state, store::RunState::failed);
  EXPECT_EQ(run(id).error, "internal error while driving the run: boom");
  EXPECT_FALSE(controller_->run_active());
}

// ---------------------------------------------------------------- secure aggregation

RunConfig secure_config() {
  auto parsed = parse_run_config(
      R"({"name":"s","model":{"type":"logreg","input_shape":[4],"num_classes":2},)"
      R"("rounds":1,"clients_per_round":5,"min_clients":3,"round_timeout_s":10,)"
      R"("wait_for_clients_s":5,"federated_evaluation":false,)"
      R"("privacy":{"secure_aggregation":{"stage_timeout_s":5,"bind_keys":false}}})");
  EXPECT_TRUE(parsed) << parsed.error().message;
  return *parsed;
}

// Drives SecAgg+ clients (shared/secagg) against the controller through FakeSessions: the
// controller sees only the frames a real client would send.
class SecureSites {
 public:
  SecureSites(RunController& controller, FakeSessions& sessions)
      : controller_(controller), sessions_(sessions) {}

  void train(const std::string& id, float delta) {
    const auto* sent = sessions_.last_sent_to(id);
    ASSERT_NE(sent, nullptr);
    ASSERT_TRUE(sent->request.privacy.secure_aggregation);
    auto& site = sites_[id];
    site.envelope = {sent->request.run_id, sent->request.round, sent->request.nonce};
    site.client.emplace(secagg::SecAggClient::start(
                            {sent->request.run_id, sent->request.round, id, nullptr, nullptr})
                            .value());
    site.delta.assign(sent->global->size(), delta);
    deliver(id, protocol::MessageType::secagg_keys,
            secagg::to_metadata(site.envelope, site.client->advertise()));
  }
  // Answers the latest message of the stage for `id`; false when there is none.
  bool share(const std::string& id) {
    auto* m = latest(id, protocol::MessageType::secagg_neighbours);
    if (m == nullptr) {
      return false;
    }
    auto keys = secagg::parse_neighbour_keys(m->metadata).value();
    weight_cap_ = keys.body.plan.weight_cap;
    auto upload = sites_[id].client->share_keys(keys.body).value();
    deliver(id, protocol::MessageType::secagg_shares,
            secagg::to_metadata(sites_[id].envelope, upload));
    return true;
  }
  bool mask(const std::string& id, std::uint64_t samples, std::vector<double> metrics = {}) {
    auto* m = latest(id, protocol::MessageType::secagg_relay);
    if (m == nullptr) {
      return false;
    }
    auto relayed = secagg::parse_relayed_shares(m->metadata).value();
    Rng rounding(7);
    const double weight =
        double(std::min<std::uint64_t>(samples, weight_cap_)) / double(weight_cap_);
    auto words =
        sites_[id]
            .client->masked_input(relayed.body, sites_[id].delta, weight, rounding, metrics)
            .value();
    protocol::Frame frame;
    frame.type = protocol::MessageType::secagg_masked;
    frame.metadata = secagg::to_metadata(sites_[id].envelope);
    frame.payload.resize(words.size() * 4);
    std::memcpy(frame.payload.data(), words.data(), frame.payload.size());
    controller_.on_secure_message(id, frame);
    controller_.poll();
    return true;
  }
  bool sign(const std::string& id) {
    auto* m = latest(id, protocol::MessageType::secagg_survivors);
    if (m == nullptr) {
      return false;
    }
    auto list = secagg::parse_survivor_list(m->metadata).value();
    auto signature = sites_[id].client->sign_survivors(list.body).value();
    deliver(id, protocol::MessageType::secagg_signed,
            secagg::to_metadata(sites_[id].envelope, signature));
    return true;
  }
  bool unmask(const std::string& id) {
    auto* m = latest(id, protocol::MessageType::secagg_unmask);
    if (m == nullptr) {
      return false;
    }
    auto request = secagg::parse_unmask_request(m->metadata).value();
    auto response = sites_[id].client->unmask(request.body).value();
    deliver(id, protocol::MessageType::secagg_revealed,
            secagg::to_metadata(sites_[id].envelope, response));
    return true;
  }
  void deliver(const std::string& id, protocol::MessageType type, std::string metadata) {
    protocol::Frame frame;
    frame.type = type;
    frame.metadata = std::move(metadata);
    controller_.on_secure_message(id, frame);
    controller_.poll();
  }

 private:
  struct Site {
    secagg::Envelope envelope;
    std::optional<secagg::SecAggClient> client;
    std::vector<float> delta;
  };
  const FakeSessions::Other* latest(const std::string& id, protocol::MessageType type) const {
    for (auto it = sessions_.others.rbegin(); it != sessions_.others.rend(); ++it) {
      if (it->client_id == id && it->type == type) {
        return &*it;
      }
    }
    return nullptr;
  }
  RunController& controller_;
  FakeSessions& sessions_;
  std::map<std::string, Site> sites_;
  std::uint64_t weight_cap_ = 1;
};

TEST_F(RunControllerTest, ASecureRoundCommitsTheWeightedMeanWithoutSeeingAnUpdate) {
  const std::map<std::string, std::uint64_t> samples{
      {"a", 100}, {"b", 100}, {"c", 50}, {"d", 100}, {"e", 25}};
  for (const auto& [id, n] : samples) {
    connect(id, n);
  }
  const auto run_id = start(secure_config());
  ASSERT_EQ(sessions_.sent.size(), 5u);
  const auto global = *sessions_.sent[0].global;
  SecureSites sites(*controller_, sessions_);
  const std::map<std::string, float> delta{{"a", 1}, {"b", 2}, {"c", 4}, {"d", -1}, {"e", 8}};
  for (const auto& [id, d] : delta) {
    sites.train(id, d);
  }
  ASSERT_EQ(controller_->round_stage(), RoundStage::sharing_keys);
  for (const auto& [id, d] : delta) {
    ASSERT_TRUE(sites.share(id)) << id;
  }
  ASSERT_EQ(controller_->round_stage(), RoundStage::masking);
  // A plain update is refused in a secure round.
  answer("a", 100.0f);
  EXPECT_EQ(events_.count("update_stale"), 1u);
  // "d" drops after sharing its keys: its pairwise masks are removed with its key shares.
  controller_->on_session_lost("d", "gone");
  for (const auto& [id, d] : delta) {
    if (id != "d") {
      ASSERT_TRUE(sites.mask(id, samples.at(id))) << id;
    }
  }
  ASSERT_EQ(controller_->round_stage(), RoundStage::consistency);
  for (const auto& [id, d] : delta) {
    if (id != "d") {
      ASSERT_TRUE(sites.sign(id)) << id;
    }
  }
  ASSERT_EQ(controller_->round_stage(), RoundStage::unmasking);
  for (const auto& [id, d] : delta) {
    if (id != "d") {
      ASSERT_TRUE(sites.unmask(id)) << id;
    }
  }
  ASSERT_EQ(committed_.size(), 1u) << (failed_.empty() ? "" : failed_[0].failure_reason);
  EXPECT_EQ(committed_[0].accepted, 4);
  EXPECT_EQ(committed_[0].dropped, 1);
  EXPECT_EQ(committed_[0].train_loss, 0.0);  // no per-client metric exists to average
  // weights min(n, 100) / 100: a 1, b 1, c 0.5, e 0.25
  const double expected = (1 * 1 + 1 * 2 + 0.5 * 4 + 0.25 * 8) / (1 + 1 + 0.5 + 0.25);
  auto checkpoint = store_.latest_checkpoint(run_id);
  ASSERT_TRUE(checkpoint && *checkpoint);
  auto bundle = model::load_params((*checkpoint)->ref.path);
  ASSERT_TRUE(bundle);
  for (std::size_t i = 0; i < global.size(); ++i) {
    EXPECT_NEAR(bundle->params[i], global[i] + expected, 1e-4);
  }
  // The history says who took part and how far the dropout got, never an update.
  auto results = store_.list_client_results(run_id, 1);
  ASSERT_TRUE(results) << results.error().message;
  bool found_d = false;
  for (const auto& r : *results) {
    if (r.client_id == "d") {
      found_d = true;
      EXPECT_NE(r.reason.find("shared keys"), std::string::npos) << r.reason;
    } else {
      EXPECT_EQ(r.samples, 0);
      EXPECT_EQ(r.loss, 0.0);
    }
  }
  EXPECT_TRUE(found_d);
}

TEST_F(RunControllerTest, ASecureRoundBelowTheThresholdFailsAndTheRunFollowsItsPolicy) {
  for (auto id : {"a", "b", "c", "d", "e"}) {
    connect(id);
  }
  const auto run_id = start(secure_config());
  SecureSites sites(*controller_, sessions_);
  // Only two of five send keys; the stage times out.
  sites.train("a", 1);
  sites.train("b", 1);
  EXPECT_EQ(controller_->round_stage(), RoundStage::collecting);
  clock_.advance(kRoundTimeout);
  controller_->poll();
  ASSERT_EQ(failed_.size(), 1u);
  EXPECT_NE(failed_[0].failure_reason.find("fewer than the threshold"), std::string::npos)
      << failed_[0].failure_reason;
  EXPECT_EQ(run(run_id).state, store::RunState::paused);
  // A message for the failed round changes nothing.
  sites.deliver("a", protocol::MessageType::secagg_keys, "{}");
  EXPECT_GE(events_.count("secure_message_refused"), 1u);
}

// ---------------------------------------------------------------- differential privacy

// Adaptive clipping under secure aggregation with distributed DP: the server never sees a
// norm, only the sum of the sites' (noised) unclipped bits in the masked vector's last slot,
// and moves the clip from it, C <- C exp(-eta (b - gamma)): down when every update fitted
// under C, up when none did. The next TRAIN carries the new C; each round's charge keeps it.
TEST_F(RunControllerTest, ASecureDistributedDpRunMovesItsClipFromTheMaskedUnclippedBits) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  auto c = parse_run_config(
      R"({"model":{"type":"logreg","input_shape":[4],"num_classes":2},"rounds":3,)"
      R"("clients_per_round":3,"min_clients":3,"round_timeout_s":10,"wait_for_clients_s":5,)"
      R"("federated_evaluation":false,)"
      R"("privacy":{"secure_aggregation":{"stage_timeout_s":5,"bind_keys":false},)"
      R"("dp":{"mode":"client_distributed","clip_norm":2.0,"noise_multiplier":1.0,)"
      R"("delta":1e-5,"epsilon":100,)"
      R"("adaptive_clip":{"target_quantile":0.5,"learning_rate":0.2,"count_stddev":1.0}}}})");
  ASSERT_TRUE(c) << c.error().message;
  start(*c);
  SecureSites sites(*controller_, sessions_);
  const auto play_round = [&](double bit) {
    for (auto id : {"a", "b", "c"}) {
      const auto& terms = sessions_.last_sent_to(id)->request.privacy;
      EXPECT_DOUBLE_EQ(terms.count_stddev, 1.0);
      sites.train(id, 0.01f);
    }
    for (auto id : {"a", "b", "c"}) {
      ASSERT_TRUE(sites.share(id));
    }
    // The slot carries report / scale; the scale is public (t, count_stddev, clip_range).
    auto relay = std::find_if(sessions_.others.rbegin(), sessions_.others.rend(), [](auto& o) {
      return o.type == protocol::MessageType::secagg_neighbours;
    });
    ASSERT_NE(relay, sessions_.others.rend());
    const auto plan = secagg::parse_neighbour_keys(relay->metadata).value().body.plan;
    ASSERT_EQ(plan.metric_slots, 1u);                 // the bit, nothing else
    EXPECT_EQ(secagg::required_survivors(plan), 3u);  // the run's quorum, above t = 2
    const auto slot =
        privacy::clip_report_slot(1.0, true, secagg::required_survivors(plan), plan.clip_range)
            .value();
    for (auto id : {"a", "b", "c"}) {
      ASSERT_TRUE(sites.mask(id, 100, {bit / slot.scale}));
    }
    for (auto id : {"a", "b", "c"}) {
      ASSERT_TRUE(sites.sign(id));
    }
    for (auto id : {"a", "b", "c"}) {
      ASSERT_TRUE(sites.unmask(id));
    }
  };
  EXPECT_DOUBLE_EQ(sessions_.last_sent_to("a")->request.privacy.clip_norm, 2.0);
  // Round 1: every update fitted (+1/2 each, b = 1 > 0.5): the clip shrinks.
  play_round(+0.5);
  ASSERT_EQ(committed_.size(), 1u) << (failed_.empty() ? "" : failed_[0].failure_reason);
  const double after_one = 2.0 * std::exp(-0.2 * (1.0 - 0.5));
  ASSERT_TRUE(committed_[0].dp_charge && committed_[0].dp_charge->clip_norm);
  EXPECT_NEAR(*committed_[0].dp_charge->clip_norm, after_one, 1e-5);
  EXPECT_NEAR(sessions_.last_sent_to("a")->request.privacy.clip_norm, after_one, 1e-5);
  // Round 2: none fitted (b = 0 < 0.5): it grows back.
  play_round(-0.5);
  ASSERT_EQ(committed_.size(), 2u) << (failed_.empty() ? "" : failed_[0].failure_reason);
  EXPECT_NEAR(*committed_[1].dp_charge->clip_norm, after_one * std::exp(-0.2 * (0.0 - 0.5)), 1e-5);
}

TEST_F(RunControllerTest, ADpRunRecordsEpsilonPerRoundAndStopsBeforeTheBudgetIsExceeded) {
  // z = 2 at q = 1: the budget is what two rounds cost (plus a hair), so the third round
  // must not start.
  auto accountant = privacy::RdpAccountant::create().value();
  ASSERT_TRUE(accountant.compose_poisson_gaussian(1.0, 2.0, 2));
  const double two_rounds = accountant.epsilon(1e-5)->epsilon;
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  auto c = parse_run_config(
      R"({"model":{"type":"logreg","input_shape":[4],"num_classes":2},"rounds":5,)"
      R"("clients_per_round":3,"min_clients":2,"federated_evaluation":false,)"
      R"("privacy":{"dp":{"mode":"client_central","clip_norm":1.0,"noise_multiplier":2.0,)"
      R"("delta":1e-5,"epsilon":)" +
      std::to_string(two_rounds * 1.000001) + "}}}");
  ASSERT_TRUE(c) << c.error().message;
  const auto run_id = start(*c);
  for (int round = 1; round <= 2; ++round) {
    ASSERT_EQ(controller_->active_round(), round);
    const auto& sent = *sessions_.last_sent_to("a");
    EXPECT_EQ(sent.request.privacy.dp, protocol::DpMode::client_central);
    EXPECT_DOUBLE_EQ(sent.request.privacy.noise_multiplier, 2.0);
    for (auto id : {"a", "b", "c"}) {
      answer(id, 0.5f);
    }
  }
  ASSERT_EQ(committed_.size(), 2u);
  ASSERT_TRUE(committed_[0].epsilon && committed_[1].epsilon);
  EXPECT_LT(*committed_[0].epsilon, *committed_[1].epsilon);
  EXPECT_NEAR(*committed_[1].epsilon, two_rounds, 1e-9);
  const auto stored = run(run_id);
  EXPECT_EQ(stored.state, store::RunState::finished);
  EXPECT_EQ(stored.last_round, 2);
  EXPECT_NE(stored.error.find("privacy budget: round 3"), std::string::npos) << stored.error;
  // The history keeps the epsilon of each round.
  auto rounds = store_.list_rounds(run_id);
  ASSERT_TRUE(rounds);
  ASSERT_EQ(rounds->size(), 2u);
  EXPECT_EQ((*rounds)[1].epsilon, committed_[1].epsilon);
}

// A restart composes the run's past rounds exactly as they were charged (their noise
// multiplier and their sites' shapes, stored with each round), not as if today's sites had
// taken part in them at a newly calibrated noise: here the costly small site of rounds 1-2
// is gone after the restart, and round 3 is still charged for it.
TEST_F(RunControllerTest, ARestartedDpRunChargesItsPastRoundsAsTheyWere) {
  connect("small", 320);  // q = 0.1, 10 steps a round at batch 32
  connect("mid", 640);    // q = 0.05, 20 steps
  auto c = parse_run_config(
      R"({"model":{"type":"logreg","input_shape":[4],"num_classes":2},"rounds":4,)"
      R"("clients_per_round":2,"min_clients":2,"federated_evaluation":false,"batch_size":32,)"
      R"("local_epochs":1,"privacy":{"dp":{"mode":"record","clip_norm":1.0,)"
      R"("noise_multiplier":0,"delta":1e-5,"epsilon":8}}})");
  ASSERT_TRUE(c) << c.error().message;
  const auto id = start(*c);
  for (int round = 1; round <= 2; ++round) {
    ASSERT_EQ(controller_->active_round(), round);
    answer("small", 0.5f);
    answer("mid", 0.5f);
  }
  ASSERT_EQ(committed_.size(), 2u);
  ASSERT_TRUE(committed_[1].dp_charge);
  const double z = committed_[1].dp_charge->noise_multiplier;
  EXPECT_GT(z, 0);
  EXPECT_EQ(committed_[1].dp_charge->shapes,
            (std::vector<store::DpCharge::Shape>{{0.05, 20}, {0.1, 10}}));  // sorted by q
  // The server dies; the small site is gone when it comes back, a large one has joined.
  controller_->shutdown();
  sessions_.disconnect("small");
  connect("large", 1280);  // q = 0.025, 40 steps
  sessions_.sent.clear();
  make_controller();
  ASSERT_TRUE(controller_->resume_runs());
  controller_->poll();
  ASSERT_EQ(controller_->active_round(), 3);
  // The noise the run was planned with, not one calibrated for today's cheaper sites.
  EXPECT_DOUBLE_EQ(sessions_.last_sent_to("mid")->request.privacy.noise_multiplier, z);
  answer("mid", 0.5f);
  answer("large", 0.5f);
  ASSERT_EQ(committed_.size(), 3u);
  ASSERT_TRUE(committed_[2].epsilon);
  // Independently: the small site's shape over three rounds at z is the worst.
  double worst = 0;
  for (const auto& [q, steps] : {std::pair{0.1, 10}, {0.05, 20}, {0.025, 40}}) {
    auto accountant = privacy::RdpAccountant::create().value();
    ASSERT_TRUE(accountant.compose_poisson_gaussian(q, z, 3 * steps));
    worst = std::max(worst, accountant.epsilon(1e-5)->epsilon);
  }
  EXPECT_NEAR(*committed_[2].epsilon, worst, 1e-9);
  auto small_alone = privacy::RdpAccountant::create().value();
  ASSERT_TRUE(small_alone.compose_poisson_gaussian(0.1, z, 30));
  EXPECT_DOUBLE_EQ(worst, small_alone.epsilon(1e-5)->epsilon);
  EXPECT_EQ(run(id).last_round, 3);
}

}  // namespace
}  // namespace fedcore::federation
