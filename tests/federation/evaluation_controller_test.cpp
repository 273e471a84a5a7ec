// Federated evaluation in the run controller, driven by hand (ManualClock, fake sessions, a
// real SQLite history): after aggregation the round's participants are asked to evaluate
// the NEW global model, the round commits with their answers and its weighted mean, the
// silent time out at the deadline, the offline and the disconnected are recorded as such,
// and the last round's model is evaluated by every client that took part in the run.
#include <algorithm>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/federation/evaluation_round.hpp"
#include "server/federation/run_controller.hpp"
#include "shared/model/param_io.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::federation {
namespace {

using namespace std::chrono_literals;

class Sessions final : public SessionDirectory {
 public:
  struct Sent {
    std::string client_id;
    protocol::MessageType type;
    std::string metadata;
    std::shared_ptr<const std::vector<float>> payload;
  };
  std::vector<Candidate> online() const override { return clients; }
  void send_train(const std::string& client_id, std::string metadata,
                  std::shared_ptr<const std::vector<float>> global,
                  std::function<void()> /*written*/) override {
    sent.push_back({client_id, protocol::MessageType::train, std::move(metadata), global});
  }
  void send(const std::string& client_id, protocol::MessageType type, std::string metadata,
            std::shared_ptr<const std::vector<float>> payload) override {
    sent.push_back({client_id, type, std::move(metadata), std::move(payload)});
  }
  void connect(const std::string& id, bool evaluates = true) {
    clients.push_back({id, {4}, 2, 100, false, evaluates});
  }
  void disconnect(const std::string& id) {
    std::erase_if(clients, [&](const Candidate& c) { return c.client_id == id; });
  }
  // The frames of `type` sent since index `from`.
  std::vector<const Sent*> of(protocol::MessageType type, std::size_t from = 0) const {
    std::vector<const Sent*> out;
    for (std::size_t i = from; i < sent.size(); ++i) {
      if (sent[i].type == type) {
        out.push_back(&sent[i]);
      }
    }
    return out;
  }
  std::vector<Candidate> clients;
  std::vector<Sent> sent;
};

class Nonces final : public Entropy {
 public:
  std::string nonce() override {
    auto digits = std::to_string(++count_);
    return std::string(32 - digits.size(), '0') + digits;
  }

 private:
  std::uint64_t count_ = 0;
};

class Events final : public EventSink {
 public:
  void record(std::string_view kind, std::optional<std::int64_t>, std::optional<std::int64_t>,
              std::string_view client_id, std::string detail) override {
    events.push_back({std::string(kind), std::string(client_id), std::move(detail)});
  }
  std::size_t count(std::string_view kind) const {
    return std::count_if(events.begin(), events.end(),
                         [&](const auto& e) { return e.kind == kind; });
  }
  struct Event {
    std::string kind;
    std::string client_id;
    std::string detail;
  };
  std::vector<Event> events;
};

RunConfig config(std::string_view extra = "", int per_round = 3, int rounds = 2) {
  const std::string text =
      R"({"name":"e","model":{"type":"logreg","input_shape":[4],"num_classes":2},)"
      R"("rounds":)" +
      std::to_string(rounds) + R"(,"clients_per_round":)" + std::to_string(per_round) +
      R"(,"min_clients":2,"round_timeout_s":10,)"
      R"("wait_for_clients_s":5,"evaluation_timeout_s":20)" +
      std::string(extra) + "}";
  auto parsed = parse_run_config(text);
  EXPECT_TRUE(parsed) << parsed.error().message;
  return *parsed;
}

class EvaluationControllerTest : public ::testing::Test {
 protected:
  EvaluationControllerTest()
      : store_(std::move(store::HistoryStore::open(dir_.path("h.db")).value())) {
    ServerHooks hooks;
    hooks.round_committed = [this](std::int64_t, const store::RoundRecord& r) {
      committed_.push_back(r);
    };
    hooks.run_ended = [this](std::int64_t, store::RunState state) { ended_.push_back(state); };
    controller_ = std::make_unique<RunController>(
        RunEnvironment{store_, sessions_, clock_, nonces_, events_, hooks, dir_.path("ckpt")});
  }

  void connect(const std::string& id, bool evaluates = true) {
    sessions_.connect(id, evaluates);
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

  // Every client asked to train in the latest round answers with the model it got + delta.
  void train_all(float delta = 1.0f, std::size_t from = 0) {
    for (const auto* sent : sessions_.of(protocol::MessageType::train, from)) {
      auto request = protocol::parse_train_request(sent->metadata);
      ASSERT_TRUE(request);
      if (request->round != controller_->active_round()) {
        continue;
      }
      train(*sent, delta);
    }
  }
  void train(const Sessions::Sent& sent, float delta, std::uint64_t samples = 10) {
    auto request = protocol::parse_train_request(sent.metadata);
    ASSERT_TRUE(request);
    protocol::UpdateReport report;
    report.run_id = request->run_id;
    report.round = request->round;
    report.nonce = request->nonce;
    report.layout_fingerprint = request->layout_fingerprint;
    report.samples = samples;
    report.loss = 0.5;
    report.accuracy = 0.5;
    std::vector<float> params(*sent.payload);
    for (auto& p : params) {
      p += delta;
    }
    controller_->on_update(sent.client_id, report, params, 100);
    controller_->poll();
  }

  // The EVALUATE sent to `id` for the round in flight.
  std::optional<protocol::EvaluateRequest> evaluate_request(const std::string& id) {
    for (const auto* sent : sessions_.of(protocol::MessageType::evaluate)) {
      auto request = protocol::parse_evaluate_request(sent->metadata);
      EXPECT_TRUE(request) << request.error().message;
      if (sent->client_id == id && request->round == controller_->active_round()) {
        return *request;
      }
    }
    return std::nullopt;
  }

  void evaluation(const std::string& id, protocol::EvaluationReport report) {
    protocol::Frame frame;
    frame.type = protocol::MessageType::evaluation;
    frame.metadata = protocol::to_metadata(report);
    controller_->on_evaluation(id, frame);
    controller_->poll();
  }
  void evaluated(const std::string& id, double loss, double accuracy, std::uint64_t samples) {
    auto request = evaluate_request(id);
    ASSERT_TRUE(request) << id << " was not asked to evaluate";
    evaluation(id, {request->run_id, request->round, request->nonce, protocol::EvaluationStatus::ok,
                    loss, accuracy, samples, ""});
  }

  std::map<std::string, store::ClientEvaluation> rows(std::int64_t run, std::int64_t round) {
    auto listed = store_.list_evaluations(run, round);
    EXPECT_TRUE(listed) << listed.error().message;
    std::map<std::string, store::ClientEvaluation> out;
    for (auto& row : *listed) {
      out[row.client_id] = row;
    }
    return out;
  }

  testing::TempDir dir_;
  store::HistoryStore store_;
  ManualClock clock_;
  Sessions sessions_;
  Nonces nonces_;
  Events events_;
  std::unique_ptr<RunController> controller_;
  std::vector<store::RoundRecord> committed_;
  std::vector<store::RunState> ended_;
};

TEST(RoundStage, EvaluationSitsBetweenAggregatingAndCommitting) {
  using enum RoundStage;
  using enum RoundEvent;
  EXPECT_EQ(next_stage(aggregating, evaluation_requested), evaluating);
  EXPECT_EQ(next_stage(evaluating, evaluated), committing);
  EXPECT_EQ(next_stage(evaluating, deadline_passed), committing);
  EXPECT_EQ(next_stage(evaluating, abandoned), failed);
  EXPECT_EQ(next_stage(evaluating, committed), std::nullopt);
  EXPECT_EQ(next_stage(collecting, evaluated), std::nullopt);
  EXPECT_EQ(round_stage_name(evaluating), "evaluating");
  EXPECT_EQ(round_event_name(evaluation_requested), "evaluation_requested");
}

TEST_F(EvaluationControllerTest, TheNewAggregateIsEvaluatedAndCommittedWithItsMean) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  const auto run = start(config());
  // Plain runs no longer evaluate the received model while training.
  for (const auto* sent : sessions_.of(protocol::MessageType::train)) {
    EXPECT_FALSE(protocol::parse_train_request(sent->metadata)->evaluate);
  }
  train_all(2.0f);
  ASSERT_EQ(controller_->round_stage(), RoundStage::evaluating);
  EXPECT_TRUE(committed_.empty()) << "the round waits for its evaluations";
  const auto asked = sessions_.of(protocol::MessageType::evaluate);
  ASSERT_EQ(asked.size(), 3u);
  const auto new_global = *asked[0]->payload;
  auto request = evaluate_request("a");
  ASSERT_TRUE(request);
  EXPECT_EQ(request->round, 1);
  EXPECT_FALSE(request->final_model);
  EXPECT_NE(evaluate_request("a")->nonce, evaluate_request("b")->nonce);

  evaluated("a", 0.5, 0.8, 10);
  evaluated("b", 0.25, 0.9, 30);
  EXPECT_EQ(controller_->round_stage(), RoundStage::evaluating);
  evaluation("c", {run, 1, evaluate_request("c")->nonce, protocol::EvaluationStatus::refused, 0, 0,
                   0, "site policy: this site does not evaluate models"});
  // Everyone answered: committed without waiting for the deadline.
  ASSERT_EQ(committed_.size(), 1u);
  EXPECT_NEAR(*committed_[0].fed_eval_accuracy, (0.8 * 10 + 0.9 * 30) / 40, 1e-12);
  EXPECT_NEAR(*committed_[0].fed_eval_loss, (0.5 * 10 + 0.25 * 30) / 40, 1e-12);
  const auto stored = rows(run, 1);
  ASSERT_EQ(stored.size(), 3u);
  EXPECT_EQ(stored.at("a").status, store::EvaluationStatus::ok);
  EXPECT_EQ(stored.at("b").samples, 30);
  EXPECT_EQ(stored.at("c").status, store::EvaluationStatus::refused);
  EXPECT_EQ(stored.at("c").message, "site policy: this site does not evaluate models");
  // What was evaluated is what was committed: the checkpoint and round 2's TRAIN.
  auto checkpoint = store_.latest_checkpoint(run);
  ASSERT_TRUE(checkpoint && *checkpoint);
  EXPECT_EQ(model::load_params((*checkpoint)->ref.path)->params, new_global);
  const auto round2 = sessions_.of(protocol::MessageType::train);
  EXPECT_EQ(*round2.back()->payload, new_global);
  EXPECT_EQ(events_.count("round_evaluated"), 1u);
}

TEST_F(EvaluationControllerTest, TheSilentTimeOutAtTheDeadlineAndTheDisconnectedAreRecorded) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  const auto run = start(config());
  train_all();
  ASSERT_EQ(controller_->round_stage(), RoundStage::evaluating);
  evaluated("a", 0.5, 0.75, 20);
  sessions_.disconnect("b");
  controller_->on_session_lost("b", "end of stream");
  controller_->poll();
  // c never answers: the stage waits exactly until evaluation_timeout_s (20 s).
  clock_.advance(19s);
  controller_->poll();
  EXPECT_EQ(controller_->round_stage(), RoundStage::evaluating);
  EXPECT_TRUE(committed_.empty());
  ASSERT_TRUE(controller_->next_wakeup().has_value());
  clock_.advance(1s);
  controller_->poll();
  ASSERT_EQ(committed_.size(), 1u);
  EXPECT_EQ(*committed_[0].fed_eval_accuracy, 0.75);  // a's alone
  const auto stored = rows(run, 1);
  EXPECT_EQ(stored.at("b").status, store::EvaluationStatus::dropped);
  EXPECT_EQ(stored.at("b").message, "connection lost: end of stream");
  EXPECT_EQ(stored.at("c").status, store::EvaluationStatus::timeout);
  EXPECT_FALSE(stored.at("c").loss.has_value());
  // A late answer is refused and changes nothing.
  const auto late = evaluate_request("c");
  EXPECT_FALSE(late.has_value()) << "round 2 is in flight; c's round-1 request is over";
  evaluation("c", {run, 1, "00000000000000000000000000000009", protocol::EvaluationStatus::ok, 0.1,
                   0.99, 5, ""});
  EXPECT_EQ(events_.count("evaluation_refused"), 1u);
  EXPECT_EQ(rows(run, 1).at("c").status, store::EvaluationStatus::timeout);
}

TEST_F(EvaluationControllerTest, StaleAndMalformedAnswersAreRefused) {
  for (auto id : {"a", "b"}) {
    connect(id);
  }
  const auto run = start(config("", 2));
  train_all();
  const auto a = *evaluate_request("a");
  // Another round, another nonce, a client that was not asked: refused, a still asked.
  evaluation("a", {run, 2, a.nonce, protocol::EvaluationStatus::ok, 0.1, 0.9, 5, ""});
  evaluation("a", {run, 1, std::string(32, 'f'), protocol::EvaluationStatus::ok, 0.1, 0.9, 5, ""});
  evaluation("zed", {run, 1, a.nonce, protocol::EvaluationStatus::ok, 0.1, 0.9, 5, ""});
  EXPECT_EQ(events_.count("evaluation_refused"), 3u);
  EXPECT_EQ(controller_->round_stage(), RoundStage::evaluating);
  evaluated("a", 0.5, 0.5, 5);
  evaluated("a", 0.4, 0.6, 5);  // a second answer
  EXPECT_EQ(events_.count("evaluation_refused"), 4u);
  // b's answer does not parse: it is b's answer all the same (failed), no deadline wait.
  protocol::Frame frame;
  frame.type = protocol::MessageType::evaluation;
  frame.metadata = R"({"run":1,"round":1,"status":"ok"})";
  controller_->on_evaluation("b", frame);
  controller_->poll();
  ASSERT_EQ(committed_.size(), 1u);
  const auto stored = rows(run, 1);
  EXPECT_EQ(stored.at("a").loss, 0.5);
  EXPECT_EQ(stored.at("b").status, store::EvaluationStatus::failed);
  EXPECT_NE(stored.at("b").message.find("malformed evaluation"), std::string::npos);
}

TEST_F(EvaluationControllerTest, TheFinalModelIsEvaluatedByEveryClientThatTookPart) {
  for (auto id : {"a", "b", "c", "d"}) {
    connect(id);
  }
  // Two of four per round: the final model's evaluators are both rounds' participants.
  const auto run = start(config(R"(,"evaluate_every":5)", 2));
  std::set<std::string> participants;
  for (const auto* sent : sessions_.of(protocol::MessageType::train)) {
    participants.insert(sent->client_id);
  }
  train_all();
  // Round 1 is not due (every 5th round, and the last): committed without evaluating.
  ASSERT_EQ(committed_.size(), 1u);
  EXPECT_FALSE(committed_[0].fed_eval_accuracy.has_value());
  EXPECT_TRUE(sessions_.of(protocol::MessageType::evaluate).empty());
  const auto first = sessions_.sent.size() - 2;
  for (const auto* sent : sessions_.of(protocol::MessageType::train, first)) {
    participants.insert(sent->client_id);
  }
  train_all(1.0f, first);
  ASSERT_EQ(controller_->round_stage(), RoundStage::evaluating);
  std::set<std::string> asked;
  for (const auto* sent : sessions_.of(protocol::MessageType::evaluate)) {
    asked.insert(sent->client_id);
    EXPECT_TRUE(protocol::parse_evaluate_request(sent->metadata)->final_model);
  }
  EXPECT_EQ(asked, participants);
  for (const auto& id : asked) {
    evaluated(id, 0.5, 0.5, 10);
  }
  ASSERT_EQ(committed_.size(), 2u);
  EXPECT_EQ(rows(run, 2).size(), participants.size());
  EXPECT_EQ(ended_, std::vector{store::RunState::finished});
}

TEST_F(EvaluationControllerTest, OfflineAndIncapableParticipantsAreRecordedNotAsked) {
  for (auto id : {"a", "b"}) {
    connect(id);
  }
  connect("old", false);
  const auto run = start(config("", 3, 1));
  train_all();
  ASSERT_EQ(controller_->round_stage(), RoundStage::evaluating);
  // b leaves between its update and the EVALUATE: there is no session to ask.
  EXPECT_EQ(sessions_.of(protocol::MessageType::evaluate).size(), 2u);  // a, b (not old)
  sessions_.disconnect("b");
  controller_->on_session_lost("b", "reset");
  controller_->poll();
  evaluated("a", 0.2, 1.0, 4);
  ASSERT_EQ(committed_.size(), 1u);
  const auto stored = rows(run, 1);
  EXPECT_EQ(stored.at("b").status, store::EvaluationStatus::dropped);
  EXPECT_EQ(stored.at("old").status, store::EvaluationStatus::failed);
  EXPECT_NE(stored.at("old").message.find("'evaluate' capability"), std::string::npos);
}

TEST_F(EvaluationControllerTest, AParticipantOfflineAtTheEndIsRecordedOffline) {
  for (auto id : {"a", "b", "c"}) {
    connect(id);
  }
  // A manual run: round 2 starts when asked, after one of round 1's participants has left.
  const auto run = start(config(R"(,"evaluate_every":5,"manual":true)", 2));
  ASSERT_TRUE(controller_->advance_round(run));
  controller_->poll();
  std::vector<std::string> first;
  for (const auto* sent : sessions_.of(protocol::MessageType::train)) {
    first.push_back(sent->client_id);
  }
  ASSERT_EQ(first.size(), 2u);
  train_all();
  ASSERT_EQ(committed_.size(), 1u);
  const std::string gone = first[0];
  sessions_.disconnect(gone);
  controller_->on_session_lost(gone, "gone");
  ASSERT_TRUE(controller_->advance_round(run));
  controller_->poll();
  const auto second_from = sessions_.of(protocol::MessageType::train).size();
  ASSERT_EQ(second_from, 4u);
  train_all(1.0f, sessions_.sent.size() - 2);
  ASSERT_EQ(controller_->round_stage(), RoundStage::evaluating);
  std::set<std::string> asked;
  for (const auto* sent : sessions_.of(protocol::MessageType::evaluate)) {
    asked.insert(sent->client_id);
  }
  EXPECT_EQ(asked.count(gone), 0u);
  for (const auto& id : asked) {
    evaluated(id, 0.5, 0.5, 10);
  }
  ASSERT_EQ(committed_.size(), 2u);
  const auto stored = rows(run, 2);
  ASSERT_EQ(stored.count(gone), 1u) << "a participant of round 1 evaluates the final model";
  EXPECT_EQ(stored.at(gone).status, store::EvaluationStatus::offline);
  EXPECT_EQ(stored.size(), asked.size() + 1);
}

TEST_F(EvaluationControllerTest, EvaluationAnswersMayCarryLittleMetadata) {
  connect("a");
  start(config());
  const auto allowance = controller_->upload_allowance("a", protocol::MessageType::evaluation);
  EXPECT_EQ(allowance.max_metadata_bytes, kMaxEvaluationMetadata);
  EXPECT_EQ(allowance.max_payload_bytes, 0u);
  EXPECT_EQ(controller_->upload_allowance("a", protocol::MessageType::update).max_metadata_bytes,
            protocol::FrameLimits{}.max_metadata_bytes);
  // The largest answer a site can write fits: 1024 bytes of words that all need escaping.
  protocol::EvaluationReport report{1,
                                    1,
                                    std::string(32, '0'),
                                    protocol::EvaluationStatus::failed,
                                    0,
                                    0,
                                    0,
                                    std::string(protocol::kMaxEvaluationMessage, '\x01')};
  EXPECT_LE(protocol::to_metadata(report).size(), kMaxEvaluationMetadata);
}

TEST(EvaluationRound, TheMeanWeighsSitesByTheirCappedTestSamples) {
  EvaluationRound round(1, 3, {{"a", "n1"}, {"b", "n2"}, {"c", "n3"}}, {"d"}, 50);
  std::string why;
  EXPECT_TRUE(
      round.on_report("a", {1, 3, "n1", protocol::EvaluationStatus::ok, 1.0, 0.5, 10, ""}, &why));
  EXPECT_TRUE(round.on_report("b", {1, 3, "n2", protocol::EvaluationStatus::ok, 0.0, 1.0, 400, ""},
                              &why));  // weighs 50
  EXPECT_FALSE(round.all_answered());
  EXPECT_FALSE(
      round.on_report("c", {1, 3, "n1", protocol::EvaluationStatus::ok, 0, 0, 1, ""}, &why));
  EXPECT_NE(why.find("nonce"), std::string::npos);
  const auto mean = round.mean();
  ASSERT_TRUE(mean);
  EXPECT_NEAR(mean->accuracy, (0.5 * 10 + 1.0 * 50) / 60, 1e-12);
  EXPECT_NEAR(mean->loss, 10.0 / 60, 1e-12);
  EXPECT_EQ(mean->samples, 60u);
  EXPECT_EQ(mean->clients, 2u);
  const auto rows = round.close();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[2].client_id, "c");
  EXPECT_EQ(rows[2].status, store::EvaluationStatus::timeout);
  EXPECT_EQ(rows[3].status, store::EvaluationStatus::offline);
  EXPECT_TRUE(round.all_answered());
}

}  // namespace
}  // namespace fedcore::federation
