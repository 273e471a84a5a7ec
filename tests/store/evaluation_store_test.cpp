// The history's federated evaluation (schema version 5): the migration from version 4 keeps
// the history, evaluations are written with their round in one transaction (or not at
// all), are read back by round, and a run's participants are the clients that contributed
// to one of its committed rounds.
#include <gtest/gtest.h>

#include "server/store/history_store.hpp"
#include "server/store/schema.hpp"
#include "tests/store/store_fixtures.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::store {
namespace {

using fedcore::testing::TempDir;
using testing::make_checkpoint;
using testing::make_client;
using testing::make_result;
using testing::make_round;
using testing::SideConnection;

ClientEvaluation evaluated(const std::string& id, double loss, double accuracy,
                           std::int64_t samples) {
  ClientEvaluation e;
  e.client_id = id;
  e.status = EvaluationStatus::ok;
  e.loss = loss;
  e.accuracy = accuracy;
  e.samples = samples;
  return e;
}

ClientEvaluation not_evaluated(const std::string& id, EvaluationStatus status,
                               const std::string& message) {
  ClientEvaluation e;
  e.client_id = id;
  e.status = status;
  e.message = message;
  return e;
}

struct Fixture {
  TempDir dir;
  std::string path = dir.path("history.db");
  HistoryStore store = std::move(HistoryStore::open(path).value());
  std::int64_t run = 0;

  Fixture() {
    for (const auto* id : {"c1", "c2", "c3"}) {
      EXPECT_TRUE(store.upsert_client(make_client(id)));
    }
    run = store.create_run("eval", "{}", 3, 1)->id;
    EXPECT_TRUE(store.set_run_state(run, RunState::running, "", 2));
  }
};

TEST(HistoryEvaluation, MigrationFromVersion4KeepsTheHistory) {
  TempDir dir;
  const auto path = dir.path("history.db");
  {
    // A database as a version-4 Fedcore left it, with a committed round.
    auto db = testing::database_at_version(path, 4);
    ASSERT_TRUE(db.exec(
        "INSERT INTO clients VALUES ('c1', 1, 1, 10, '[30]', '{}', 0);"
        "INSERT INTO runs (name, config_json, state, rounds_total, last_round, created_ms, "
        "  updated_ms) VALUES ('old-run', '{}', 'finished', 1, 1, 1, 2);"
        "INSERT INTO rounds (run_id, round, attempt, state, started_ms, finished_ms, selected, "
        "  accepted, rejected, timed_out, dropped, fed_eval_accuracy, bytes_up, bytes_down) "
        "  VALUES (1, 1, 1, 'committed', 1, 2, 1, 1, 0, 0, 0, 0.75, 10, 20);"
        "INSERT INTO client_results (run_id, round, attempt, client_id, status, samples, "
        "  bytes_up, bytes_down) VALUES (1, 1, 1, 'c1', 'ok', 10, 10, 20);"));
  }
  auto store = HistoryStore::open(path);
  ASSERT_TRUE(store) << store.error().to_string();
  auto rounds = store->list_rounds(1);
  ASSERT_TRUE(rounds);
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ((*rounds)[0].fed_eval_accuracy, 0.75);
  EXPECT_EQ(*store->run_participants(1), std::vector<std::string>{"c1"});
  // The new table is there, empty, and keeps its constraints.
  EXPECT_TRUE(store->list_evaluations(1)->empty());
  SideConnection side(path);
  EXPECT_EQ(*schema_version(side.db()), kSchemaVersion);
  EXPECT_EQ(side.count("SELECT count(*) FROM round_evaluations"), 0);
  EXPECT_FALSE(
      side.db().exec("INSERT INTO round_evaluations (run_id, round, client_id, status, loss) "
                     "VALUES (1, 1, 'c1', 'refused', 0.5)"))
      << "a refusal with a loss must be refused by the CHECK";
  EXPECT_TRUE(*store->integrity_check());
}

TEST(HistoryEvaluation, EvaluationsAreCommittedWithTheirRound) {
  Fixture f;
  auto round = make_round(f.run, 1);
  round.fed_eval_loss = 0.4;
  round.fed_eval_accuracy = 0.8;
  const std::vector<ClientResult> results = {make_result("c1", 1), make_result("c2", 2)};
  const std::vector<ClientEvaluation> evaluations = {
      evaluated("c2", 0.5, 0.75, 40), evaluated("c1", 0.25, 0.875, 60),
      not_evaluated("c3", EvaluationStatus::refused, "site policy: evaluation is not allowed")};
  auto committed =
      f.store.commit_round(round, results, make_checkpoint(f.dir.path("r1.fcp")), evaluations);
  ASSERT_TRUE(committed) << committed.error().to_string();

  auto all = f.store.list_evaluations(f.run);
  ASSERT_TRUE(all) << all.error().to_string();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].client_id, "c1");  // by client id
  EXPECT_EQ((*all)[0].round, 1);
  EXPECT_EQ((*all)[0].loss, 0.25);
  EXPECT_EQ((*all)[0].accuracy, 0.875);
  EXPECT_EQ((*all)[0].samples, 60);
  EXPECT_EQ((*all)[2].status, EvaluationStatus::refused);
  EXPECT_EQ((*all)[2].message, "site policy: evaluation is not allowed");
  EXPECT_FALSE((*all)[2].loss.has_value());
  EXPECT_EQ((*f.store.list_rounds(f.run))[0].fed_eval_accuracy, 0.8);

  // Round 2 with a client that timed out; asking for one round gives only its rows.
  ASSERT_TRUE(
      f.store.commit_round(make_round(f.run, 2), results, std::nullopt,
                           std::vector<ClientEvaluation>{not_evaluated(
                               "c1", EvaluationStatus::timeout, "no answer before the deadline")}));
  auto second = f.store.list_evaluations(f.run, 2);
  ASSERT_TRUE(second);
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ((*second)[0].round, 2);
  EXPECT_EQ((*second)[0].status, EvaluationStatus::timeout);
  EXPECT_EQ(f.store.list_evaluations(f.run)->size(), 4u);
  EXPECT_EQ(f.store.list_evaluations(999).error().code, errc::not_found);
}

TEST(HistoryEvaluation, ABadEvaluationLeavesNothingOfTheRound) {
  Fixture f;
  SideConnection side(f.path);
  const std::vector<ClientResult> results = {make_result("c1", 1)};
  // Metrics on a refusal, an ok without metrics, an unknown client, the same client twice.
  auto refusal_with_loss = not_evaluated("c1", EvaluationStatus::refused, "no");
  refusal_with_loss.loss = 0.5;
  auto ok_without_metrics = evaluated("c1", 0.5, 0.5, 10);
  ok_without_metrics.accuracy.reset();
  const std::vector<std::pair<std::vector<ClientEvaluation>, errc>> bad = {
      {{refusal_with_loss}, errc::invalid_argument},
      {{ok_without_metrics}, errc::invalid_argument},
      {{evaluated("nobody", 0.5, 0.5, 10)}, errc::failed_precondition},
      {{evaluated("c1", 0.5, 0.5, 10), evaluated("c1", 0.4, 0.6, 10)}, errc::already_exists},
  };
  for (const auto& [evaluations, code] : bad) {
    auto committed = f.store.commit_round(make_round(f.run, 1), results, std::nullopt, evaluations);
    ASSERT_FALSE(committed);
    EXPECT_EQ(committed.error().code, code) << committed.error().message;
  }
  EXPECT_EQ(side.rounds(), 0);
  EXPECT_EQ(side.results(), 0);
  EXPECT_EQ(side.count("SELECT count(*) FROM round_evaluations"), 0);
  EXPECT_EQ(f.store.get_run(f.run)->last_round, 0);
}

TEST(HistoryEvaluation, ParticipantsAreTheContributorsOfCommittedRounds) {
  Fixture f;
  EXPECT_TRUE(f.store.run_participants(f.run)->empty());
  // c3 was rejected in the committed round; c2 contributed only to a failed attempt.
  ASSERT_TRUE(f.store.record_failed_round(make_round(f.run, 1),
                                          std::vector<ClientResult>{make_result("c2", 2)}));
  ASSERT_TRUE(f.store.commit_round(
      make_round(f.run, 1),
      std::vector<ClientResult>{make_result("c1", 1), make_result("c3", 3, ResultStatus::rejected)},
      std::nullopt));
  EXPECT_EQ(*f.store.run_participants(f.run), std::vector<std::string>{"c1"});
  ASSERT_TRUE(f.store.commit_round(
      make_round(f.run, 2), std::vector<ClientResult>{make_result("c3", 3), make_result("c1", 1)},
      std::nullopt));
  EXPECT_EQ(*f.store.run_participants(f.run), (std::vector<std::string>{"c1", "c3"}));
  EXPECT_EQ(f.store.run_participants(999).error().code, errc::not_found);
}

TEST(HistoryEvaluation, SecureRoundsGetTheirMeansLater) {
  Fixture f;
  auto round = make_round(f.run, 1);
  round.fed_eval_loss.reset();
  round.fed_eval_accuracy.reset();
  ASSERT_TRUE(
      f.store.commit_round(round, std::vector<ClientResult>{make_result("c1", 1)}, std::nullopt));
  ASSERT_TRUE(f.store.set_federated_evaluation(f.run, 1, 0.125, 0.9375));
  const auto stored = (*f.store.list_rounds(f.run))[0];
  EXPECT_EQ(stored.fed_eval_loss, 0.125);
  EXPECT_EQ(stored.fed_eval_accuracy, 0.9375);
  EXPECT_EQ(f.store.set_federated_evaluation(f.run, 2, 0.1, 0.9).error().code, errc::not_found);
  EXPECT_EQ(f.store.set_federated_evaluation(999, 1, 0.1, 0.9).error().code, errc::not_found);
}

}  // namespace
}  // namespace fedcore::store
