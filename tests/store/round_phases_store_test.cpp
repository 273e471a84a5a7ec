// Where rounds spent their time (schema version 6): the migration from version 5 keeps the
// history, phases are recorded for an attempt that exists and read back field for field,
// bad times are refused, totals add every attempt up; and the writes that ride on the next
// round commit's fsync (events, phases) while a round's own event commits with it.
#include <cmath>
#include <limits>

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

struct Fixture {
  TempDir dir;
  std::string path = dir.path("history.db");
  HistoryStore store = std::move(HistoryStore::open(path).value());
  std::int64_t run = 0;

  Fixture() {
    EXPECT_TRUE(store.upsert_client(make_client("c1")));
    run = store.create_run("timed", "{}", 3, 1)->id;
    EXPECT_TRUE(store.set_run_state(run, RunState::running, "", 2));
  }
};

// Every field distinct, so a column read into the wrong field shows.
RoundPhases phases_of(std::int64_t run, std::int64_t round, std::int64_t attempt) {
  RoundPhases p;
  p.run_id = run;
  p.round = round;
  p.attempt = attempt;
  p.total_ms = 100.5;
  p.requests_queued_ms = 0.25;
  p.train_written_ms = 1.5;
  p.first_update_ms = 40.0;
  p.last_update_ms = 80.0;
  p.closed_ms = 80.5;
  p.validate_ms = 2.0;
  p.aggregate_ms = 3.0;
  p.evaluate_ms = 4.0;
  p.federated_evaluation_ms = std::nullopt;
  p.checkpoint_ms = 5.0;
  p.commit_ms = 6.0;
  p.cpu_user_ms = 7.0;
  p.cpu_system_ms = 8.0;
  return p;
}

TEST(HistoryPhases, MigrationFromVersion5KeepsTheHistory) {
  TempDir dir;
  const auto path = dir.path("history.db");
  {
    auto db = testing::database_at_version(path, 5);
    ASSERT_TRUE(db.exec(
        "INSERT INTO runs (name, config_json, state, rounds_total, last_round, created_ms, "
        "  updated_ms) VALUES ('old-run', '{}', 'finished', 1, 1, 1, 2);"
        "INSERT INTO rounds (run_id, round, attempt, state, started_ms, finished_ms, selected, "
        "  accepted, rejected, timed_out, dropped, bytes_up, bytes_down) "
        "  VALUES (1, 1, 1, 'committed', 1, 2, 1, 1, 0, 0, 0, 10, 20);"
        "INSERT INTO clients VALUES ('c1', 1, 1, 10, '[30]', '{}', 0);"
        "INSERT INTO client_results (run_id, round, attempt, client_id, status, reason, "
        "  samples, loss, bytes_up, bytes_down) "
        "  VALUES (1, 1, 1, 'c1', 'timeout', 'no answer', 10, 0.5, 10, 20);"));
  }
  auto store = HistoryStore::open(path);
  ASSERT_TRUE(store) << store.error().to_string();
  auto rounds = store->list_rounds(1);
  ASSERT_TRUE(rounds) << rounds.error().to_string();
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ((*rounds)[0].late, 0) << "the new count starts at 0";
  // client_results was rebuilt for the new status; its rows came along, field for field.
  auto results = store->list_client_results(1, 1);
  ASSERT_TRUE(results) << results.error().to_string();
  ASSERT_EQ(results->size(), 1u);
  EXPECT_EQ((*results)[0].status, ResultStatus::timeout);
  EXPECT_EQ((*results)[0].reason, "no answer");
  EXPECT_EQ((*results)[0].samples, 10);
  EXPECT_EQ((*results)[0].loss, 0.5);
  EXPECT_TRUE(store->list_round_phases(1)->empty()) << "older rounds have no phases";
  ASSERT_TRUE(store->record_round_phases(phases_of(1, 1, 1)));
  SideConnection side(path);
  EXPECT_EQ(*schema_version(side.db()), kSchemaVersion);
  // The rebuilt CHECK takes the new status and still refuses others.
  ASSERT_TRUE(store->upsert_client(make_client("c2")));
  EXPECT_TRUE(side.db().exec(
      "INSERT INTO client_results (run_id, round, attempt, client_id, status, samples, "
      "  bytes_up, bytes_down) VALUES (1, 1, 1, 'c2', 'late', 0, 0, 0)"));
  ASSERT_TRUE(store->upsert_client(make_client("c3")));
  EXPECT_FALSE(side.db().exec(
      "INSERT INTO client_results (run_id, round, attempt, client_id, status, samples, "
      "  bytes_up, bytes_down) VALUES (1, 1, 1, 'c3', 'asleep', 0, 0, 0)"));
  EXPECT_TRUE(*store->integrity_check());
}

TEST(HistoryPhases, PhasesAreRecordedPerAttemptAndReadBackWhole) {
  Fixture f;
  auto failed = f.store.record_failed_round(make_round(f.run, 1), {});
  ASSERT_TRUE(failed) << failed.error().to_string();
  auto committed = f.store.commit_round(make_round(f.run, 1), std::vector{make_result("c1", 1)},
                                        make_checkpoint(f.dir.path("r1.fcp")));
  ASSERT_TRUE(committed) << committed.error().to_string();
  auto first = phases_of(f.run, 1, 1);
  first.first_update_ms = std::nullopt;  // the failed attempt heard nothing
  first.last_update_ms = std::nullopt;
  auto second = phases_of(f.run, 1, 2);
  second.federated_evaluation_ms = 12.5;
  ASSERT_TRUE(f.store.record_round_phases(second));
  ASSERT_TRUE(f.store.record_round_phases(first));

  auto all = f.store.list_round_phases(f.run);
  ASSERT_TRUE(all) << all.error().to_string();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0], first);  // by round, then attempt
  EXPECT_EQ((*all)[1], second);

  auto again = f.store.record_round_phases(second);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, errc::already_exists) << again.error().to_string();

  auto totals = f.store.round_phase_totals();
  ASSERT_TRUE(totals) << totals.error().to_string();
  EXPECT_EQ(totals->rounds, 2);
  EXPECT_DOUBLE_EQ(totals->total_s, 0.201);
  EXPECT_DOUBLE_EQ(totals->commit_s, 0.012);
  EXPECT_DOUBLE_EQ(totals->federated_evaluation_s, 0.0125);
  // From the requests queued to the last update: 79.75 ms for the second attempt, none
  // for the first.
  EXPECT_DOUBLE_EQ(totals->updates_s, 0.07975);
  EXPECT_DOUBLE_EQ(totals->cpu_system_s, 0.016);
}

TEST(HistoryPhases, PhasesOfAnUnknownAttemptOrWithBadTimesAreRefused) {
  Fixture f;
  auto missing = f.store.record_round_phases(phases_of(f.run, 1, 1));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::not_found) << missing.error().to_string();
  EXPECT_NE(missing.error().message.find("attempt 1 is not recorded"), std::string::npos)
      << missing.error().message;

  ASSERT_TRUE(f.store.record_failed_round(make_round(f.run, 1), {}));
  for (double bad :
       {-1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    auto p = phases_of(f.run, 1, 1);
    p.commit_ms = bad;
    auto refused = f.store.record_round_phases(p);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, errc::invalid_argument);
    EXPECT_NE(refused.error().message.find("commit_ms"), std::string::npos)
        << refused.error().message;
    p = phases_of(f.run, 1, 1);
    p.last_update_ms = bad;
    EXPECT_FALSE(f.store.record_round_phases(p)) << bad;
  }
  auto unknown_run = f.store.list_round_phases(f.run + 1);
  ASSERT_FALSE(unknown_run);
  EXPECT_EQ(unknown_run.error().code, errc::not_found);
}

TEST(HistoryPhases, ARoundsOwnEventCommitsInTheRoundsTransactionOrNotAtAll) {
  Fixture f;
  EventRecord event;
  event.time_ms = 5;
  event.kind = "round_committed";
  event.run_id = f.run;
  event.round = 1;
  event.detail_json = R"({"accepted":1})";
  // A round the store refuses (a gap: round 2 before 1) writes neither row nor event.
  auto refused =
      f.store.commit_round(make_round(f.run, 2), {}, make_checkpoint(f.dir.path("x")), {}, &event);
  ASSERT_FALSE(refused);
  EXPECT_EQ(event.id, 0) << "no id for an event that was not written";
  EXPECT_TRUE(f.store.list_events(0, 10)->empty());

  auto committed = f.store.commit_round(make_round(f.run, 1), std::vector{make_result("c1", 1)},
                                        make_checkpoint(f.dir.path("r1.fcp")), {}, &event);
  ASSERT_TRUE(committed) << committed.error().to_string();
  auto events = f.store.list_events(0, 10);
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].id, event.id);
  EXPECT_EQ((*events)[0].kind, "round_committed");
  EXPECT_EQ((*events)[0].round, 1);

  // Appended events get increasing ids after it; the connection is back to FULL after
  // each write that skipped its own fsync.
  EventRecord later = event;
  later.kind = "update_accepted";
  auto id = f.store.append_event(later);
  ASSERT_TRUE(id);
  EXPECT_GT(*id, event.id);
  SideConnection side(f.path);
  EXPECT_EQ(side.count("SELECT count(*) FROM events"), 2);
}

}  // namespace
}  // namespace fedcore::store
