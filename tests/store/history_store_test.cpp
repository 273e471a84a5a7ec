// Longer than our ~500-line guideline, on purpose: the contract tests of HistoryStore,
// one section per part of its header, so a reader can check each promise next to its test
// (the crash tests and the SQLite wrapper's tests are in files of their own).
#include "server/store/history_store.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>

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

HistoryStore open_store(const std::string& path = ":memory:", const StoreOptions& options = {}) {
  auto store = HistoryStore::open(path, options);
  EXPECT_TRUE(store) << store.error().to_string();
  return std::move(store.value());
}

// A store with clients c1..c3 and one running run; returns the run's id.
std::int64_t seed_running_run(HistoryStore& store, std::int64_t rounds_total = 10) {
  for (const char* id : {"c1", "c2", "c3"}) {
    EXPECT_TRUE(store.upsert_client(make_client(id)));
  }
  auto run = store.create_run("mnist-fedavg", R"({"strategy":"fedavg"})", rounds_total, 500);
  EXPECT_TRUE(run) << run.error().to_string();
  EXPECT_TRUE(store.set_run_state(run->id, RunState::running, "", 600));
  return run->id;
}

std::vector<ClientResult> three_results() {
  return {make_result("c2", 2), make_result("c1", 1), make_result("c3", 3, ResultStatus::rejected)};
}

// ---- Schema and opening

TEST(HistorySchema, FreshFileHasCurrentVersionTablesAndWal) {
  TempDir dir;
  const auto path = dir.path("history.db");
  { open_store(path); }
  SideConnection side(path);
  EXPECT_EQ(*schema_version(side.db()), kSchemaVersion);
  EXPECT_EQ(kSchemaVersion, 8);
  auto names = side.db().prepare(
      "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
      "ORDER BY name");
  ASSERT_TRUE(names);
  std::vector<std::string> tables;
  while (*names->step() == StepResult::row) {
    tables.push_back(names->column_text(0));
  }
  EXPECT_EQ(tables,
            (std::vector<std::string>{"api_tokens", "audit_log", "checkpoints", "client_results",
                                      "clients", "events", "round_evaluations", "round_phases",
                                      "rounds", "run_feature_scales", "runs"}));
  auto mode = side.db().prepare("PRAGMA journal_mode");
  ASSERT_EQ(*mode->step(), StepResult::row);
  EXPECT_EQ(mode->column_text(0), "wal");
}

TEST(HistorySchema, MigrationsAreNumberedOneToCurrent) {
  const auto all = migrations();
  ASSERT_EQ(static_cast<std::int64_t>(all.size()), kSchemaVersion);
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].version, static_cast<std::int64_t>(i + 1));
  }
}

TEST(HistorySchema, InMemoryStoreWorks) {
  HistoryStore store = open_store(":memory:");
  auto run = store.create_run("r", "{}", 3, 1);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->id, 1);
  EXPECT_TRUE(*store.integrity_check());
}

// A second connection (the server's writer thread commits rounds through one) sees and
// writes the same history; an in-memory history has none.
TEST(HistorySchema, ASecondConnectionSharesTheFileAndAnInMemoryStoreHasNone) {
  TempDir dir;
  HistoryStore first = open_store(dir.path("history.db"));
  auto second = HistoryStore::open_second_connection(first);
  ASSERT_TRUE(second) << second.error().message;
  auto run = first.create_run("r", "{}", 3, 1);
  ASSERT_TRUE(run) << run.error().message;
  auto seen = second->get_run(run->id);
  ASSERT_TRUE(seen) << seen.error().message;
  EXPECT_EQ(seen->name, "r");
  EventRecord event;
  event.kind = "from_second";
  event.detail_json = "{}";
  ASSERT_TRUE(second->append_event(event));
  auto events = first.list_events(0, 10);
  ASSERT_TRUE(events) << events.error().message;
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].kind, "from_second");

  HistoryStore memory = open_store(":memory:");
  EXPECT_TRUE(memory.in_memory());
  EXPECT_FALSE(first.in_memory());
  auto none = HistoryStore::open_second_connection(memory);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, errc::failed_precondition) << none.error().message;
}

TEST(HistorySchema, ReopenKeepsEverything) {
  TempDir dir;
  const auto path = dir.path("history.db");
  std::int64_t run_id = 0;
  {
    HistoryStore store = open_store(path);
    run_id = seed_running_run(store);
    const auto results = three_results();
    ASSERT_TRUE(
        store.commit_round(make_round(run_id, 1), results, make_checkpoint(dir.path("r1.ckpt"))));
    ASSERT_TRUE(store.append_event({0, 5, "round_committed", run_id, 1, "", "{}"}));
  }
  HistoryStore store = open_store(path);  // migrations find nothing to do
  EXPECT_EQ(store.get_run(run_id)->last_round, 1);
  EXPECT_EQ(store.list_clients()->size(), 3u);
  EXPECT_EQ(store.list_client_results(run_id, 1)->size(), 3u);
  EXPECT_EQ(store.list_events(0, 10)->size(), 1u);
  EXPECT_EQ(store.referenced_checkpoint_paths()->size(), 1u);
  // And it keeps working after the reopen.
  ASSERT_TRUE(store.commit_round(make_round(run_id, 2), {}, std::nullopt));
  EXPECT_EQ(store.get_run(run_id)->last_round, 2);
}

TEST(HistorySchema, NewerSchemaVersionIsRefusedAndLeftAlone) {
  TempDir dir;
  const auto path = dir.path("history.db");
  { open_store(path); }
  {
    SideConnection side(path);
    ASSERT_TRUE(side.db().exec("PRAGMA user_version = 99"));
  }
  auto store = HistoryStore::open(path);
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, errc::failed_precondition);
  EXPECT_NE(store.error().message.find("99"), std::string::npos) << store.error().message;
  auto reader = HistoryStore::open_read_only(path);
  ASSERT_FALSE(reader);
  EXPECT_EQ(reader.error().code, errc::failed_precondition);
  SideConnection side(path);
  EXPECT_EQ(*schema_version(side.db()), 99);
}

TEST(HistorySchema, GarbageFileIsDataLoss) {
  TempDir dir;
  const auto path = dir.path("history.db");
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 1000; ++i) {
      out << "this is not a database ";
    }
  }
  auto store = HistoryStore::open(path);
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, errc::data_loss) << store.error().to_string();
  EXPECT_NE(store.error().message.find(path), std::string::npos);
}

TEST(HistorySchema, DamagedPageIsDataLoss) {
  TempDir dir;
  const auto path = dir.path("history.db");
  {
    HistoryStore store = open_store(path);
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(store.upsert_client(make_client("client-" + std::to_string(i))));
    }
  }  // closing the last connection checkpoints the WAL into the file
  {
    // Page 2 is the root of the first table created (clients). Scribble over its header.
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    file.seekp(4096);
    const std::string junk(64, '\x7f');
    file.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  auto store = HistoryStore::open(path);
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, errc::data_loss) << store.error().to_string();
}

// Damage that quick_check cannot see (an index entry that no longer matches its row) is
// what integrity_check is for.
TEST(HistorySchema, IntegrityCheckFindsIndexDamageThatOpenLetsThrough) {
  TempDir dir;
  const auto path = dir.path("history.db");
  {
    HistoryStore store = open_store(path);
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(store.upsert_client(make_client("client-" + std::to_string(i))));
    }
    EXPECT_TRUE(*store.integrity_check());
  }
  std::int64_t index_page = 0;
  {
    SideConnection side(path);
    index_page =
        side.count("SELECT rootpage FROM sqlite_schema WHERE name = 'sqlite_autoindex_clients_1'");
  }
  ASSERT_GT(index_page, 1);
  {
    // Five short keys fit on the index's root page. Rename the largest key there only
    // ("client-4" -> "client-z"), which keeps the index sorted but wrong.
    constexpr std::streamoff kPageSize = 4096;  // SQLite's default
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    std::string page(kPageSize, '\0');
    file.seekg((index_page - 1) * kPageSize);
    ASSERT_TRUE(file.read(page.data(), kPageSize));
    const auto at = page.find("client-4");
    ASSERT_NE(at, std::string::npos);
    file.seekp((index_page - 1) * kPageSize + static_cast<std::streamoff>(at) + 7);
    file.put('z');
  }
  HistoryStore store = open_store(path);
  auto intact = store.integrity_check();
  ASSERT_TRUE(intact) << intact.error().to_string();
  EXPECT_FALSE(*intact);
}

TEST(HistorySchema, MissingDirectoryIsNotFound) {
  TempDir dir;
  auto store = HistoryStore::open(dir.path("absent/history.db"));
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, errc::not_found) << store.error().to_string();
}

// ---- Clients

TEST(HistoryClients, UpsertKeepsFirstSeenAndUpdatesTheRest) {
  HistoryStore store = open_store();
  ClientRecord c = make_client("hospital-a", 1000);
  ASSERT_TRUE(store.upsert_client(c));
  EXPECT_EQ(*store.get_client("hospital-a"), c);

  ClientRecord again = c;
  again.first_seen_ms = 5000;  // ignored: the first sighting stays
  again.last_seen_ms = 5000;
  again.samples = 900;
  again.input_shape_json = "[32,32,3]";
  again.capabilities_json = R"({"threads":8})";
  again.online = false;
  again.rounds_joined = 77;  // derived; ignored
  ASSERT_TRUE(store.upsert_client(again));
  auto read = store.get_client("hospital-a");
  ASSERT_TRUE(read);
  EXPECT_EQ(read->first_seen_ms, 1000);
  EXPECT_EQ(read->last_seen_ms, 5000);
  EXPECT_EQ(read->samples, 900);
  EXPECT_EQ(read->input_shape_json, "[32,32,3]");
  EXPECT_EQ(read->capabilities_json, R"({"threads":8})");
  EXPECT_FALSE(read->online);
  EXPECT_EQ(read->rounds_joined, 0);

  again.last_seen_ms = 2000;  // last_seen never moves backwards
  ASSERT_TRUE(store.upsert_client(again));
  EXPECT_EQ(store.get_client("hospital-a")->last_seen_ms, 5000);

  ASSERT_TRUE(store.upsert_client(make_client("hospital-0")));
  auto all = store.list_clients();
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, "hospital-0");  // ordered by id
  EXPECT_EQ((*all)[1].id, "hospital-a");
}

TEST(HistoryClients, OnlineFlagAndUnknownClients) {
  HistoryStore store = open_store();
  ASSERT_TRUE(store.upsert_client(make_client("c1", 1000)));
  ASSERT_TRUE(store.set_client_online("c1", false, 3000));
  EXPECT_FALSE(store.get_client("c1")->online);
  EXPECT_EQ(store.get_client("c1")->last_seen_ms, 3000);
  ASSERT_TRUE(store.set_client_online("c1", true, 4000));
  EXPECT_TRUE(store.get_client("c1")->online);

  auto unknown = store.set_client_online("ghost", true, 1);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, errc::not_found);
  EXPECT_NE(unknown.error().message.find("ghost"), std::string::npos);
  auto missing = store.get_client("ghost");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::not_found);
  EXPECT_NE(missing.error().message.find("ghost"), std::string::npos);
}

TEST(HistoryClients, MalformedClientsAreInvalidArguments) {
  HistoryStore store = open_store();
  EXPECT_EQ(store.upsert_client(make_client("")).error().code, errc::invalid_argument);
  ClientRecord c = make_client("c1");
  c.capabilities_json = "{not json";
  auto bad = store.upsert_client(c);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, errc::invalid_argument);
  EXPECT_NE(bad.error().message.find("capabilities_json"), std::string::npos);
  c = make_client("c1");
  c.samples = -1;
  EXPECT_EQ(store.upsert_client(c).error().code, errc::invalid_argument);
  EXPECT_TRUE(store.list_clients()->empty());
}

TEST(HistoryClients, RoundsJoinedCountsAcceptedResultsOfCommittedRounds) {
  HistoryStore store = open_store();
  const auto run = seed_running_run(store);
  const std::vector<ClientResult> failed = {make_result("c1", 1)};
  ASSERT_TRUE(store.record_failed_round(make_round(run, 1), failed));
  ASSERT_TRUE(store.commit_round(make_round(run, 1), three_results(), std::nullopt));
  ASSERT_TRUE(store.commit_round(make_round(run, 2), three_results(), std::nullopt));
  EXPECT_EQ(store.get_client("c1")->rounds_joined, 2);  // not the failed attempt
  EXPECT_EQ(store.get_client("c3")->rounds_joined, 0);  // rejected both times
  const auto all = store.list_clients();
  EXPECT_EQ((*all)[1].rounds_joined, 2);
}

// ---- Runs

TEST(HistoryRuns, Lifecycle) {
  HistoryStore store = open_store();
  auto run = store.create_run("cifar", R"({"lr":0.1})", 20, 1000);
  ASSERT_TRUE(run) << run.error().to_string();
  EXPECT_EQ(run->state, RunState::pending);
  EXPECT_EQ(run->last_round, 0);
  EXPECT_EQ(*store.get_run(run->id), *run);

  ASSERT_TRUE(store.set_run_state(run->id, RunState::running, "", 2000));
  ASSERT_TRUE(store.set_run_state(run->id, RunState::paused, "", 3000));
  ASSERT_TRUE(store.set_run_state(run->id, RunState::running, "", 4000));
  ASSERT_TRUE(store.set_run_state(run->id, RunState::failed, "all clients dropped", 5000));
  auto failed = store.get_run(run->id);
  EXPECT_EQ(failed->state, RunState::failed);
  EXPECT_EQ(failed->error, "all clients dropped");
  EXPECT_EQ(failed->updated_ms, 5000);
  EXPECT_EQ(failed->created_ms, 1000);
  ASSERT_TRUE(store.set_run_state(run->id, RunState::running, "", 6000));  // resumed
  EXPECT_EQ(store.get_run(run->id)->error, "");
  ASSERT_TRUE(store.set_run_state(run->id, RunState::finished, "", 7000));
  auto reopen = store.set_run_state(run->id, RunState::running, "", 8000);
  ASSERT_FALSE(reopen);
  EXPECT_EQ(reopen.error().code, errc::failed_precondition);
  EXPECT_EQ(store.get_run(run->id)->state, RunState::finished);

  auto unknown = store.get_run(424242);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, errc::not_found);
  EXPECT_NE(unknown.error().message.find("424242"), std::string::npos);
  EXPECT_EQ(store.set_run_state(424242, RunState::running, "", 1).error().code, errc::not_found);

  EXPECT_EQ(store.create_run("x", "{}", 0, 1).error().code, errc::invalid_argument);
  EXPECT_EQ(store.create_run("x", "{oops", 5, 1).error().code, errc::invalid_argument);
}

TEST(HistoryRuns, ListIsNewestFirstAndPaged) {
  HistoryStore store = open_store();
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(store.create_run("run-" + std::to_string(i), "{}", 1, i));
  }
  auto first = store.list_runs(2, 0);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[0].name, "run-5");
  EXPECT_EQ((*first)[1].name, "run-4");
  auto last = store.list_runs(2, 4);
  ASSERT_EQ(last->size(), 1u);
  EXPECT_EQ((*last)[0].name, "run-1");
  EXPECT_TRUE(store.list_runs(2, 10)->empty());
  EXPECT_EQ(store.list_runs(0, 0).error().code, errc::invalid_argument);
  EXPECT_EQ(store.list_runs(kMaxPageSize + 1, 0).error().code, errc::invalid_argument);
  EXPECT_EQ(store.list_runs(1, -1).error().code, errc::invalid_argument);
}

// ---- Rounds

TEST(HistoryRounds, CommitReadsBackExactly) {
  HistoryStore store = open_store();
  const auto run = seed_running_run(store);
  const RoundRecord round = make_round(run, 1);
  const auto results = three_results();
  const CheckpointRef checkpoint = make_checkpoint("/ckpt/run1/round-1.fcp");

  auto committed = store.commit_round(round, results, checkpoint);
  ASSERT_TRUE(committed) << committed.error().to_string();
  EXPECT_EQ(committed->attempt, 1);
  EXPECT_EQ(committed->state, RoundState::committed);
  ASSERT_TRUE(committed->checkpoint_id.has_value());

  RoundRecord expected = round;
  expected.attempt = 1;
  expected.checkpoint_id = committed->checkpoint_id;
  EXPECT_EQ(*committed, expected);

  auto last = store.last_committed_round(run);
  ASSERT_TRUE(last);
  ASSERT_TRUE(last->has_value());
  EXPECT_EQ(**last, expected);
  EXPECT_FALSE((*last)->fed_eval_loss.has_value());

  auto rounds = store.list_rounds(run);
  ASSERT_TRUE(rounds);
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ((*rounds)[0], expected);

  auto read_results = store.list_client_results(run, 1);
  ASSERT_TRUE(read_results);
  auto sorted = results;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.client_id < b.client_id; });
  EXPECT_EQ(*read_results, sorted);

  auto latest = store.latest_checkpoint(run);
  ASSERT_TRUE(latest && latest->has_value());
  EXPECT_EQ((*latest)->ref, checkpoint);
  EXPECT_EQ((*latest)->round, 1);
  EXPECT_EQ((*latest)->run_id, run);
  EXPECT_EQ((*latest)->id, *committed->checkpoint_id);
  EXPECT_EQ(*store.referenced_checkpoint_paths(), std::vector<std::string>{checkpoint.path});

  auto run_record = store.get_run(run);
  EXPECT_EQ(run_record->last_round, 1);
  EXPECT_EQ(run_record->updated_ms, round.finished_ms);

  // A round without a checkpoint keeps the latest one pointing at round 1.
  ASSERT_TRUE(store.commit_round(make_round(run, 2), results, std::nullopt));
  EXPECT_EQ((*store.latest_checkpoint(run))->round, 1);
  EXPECT_EQ((*store.last_committed_round(run))->round, 2);
}

TEST(HistoryRounds, RetentionMarksTheOlderCheckpointsRemovedInTheRoundsTransaction) {
  HistoryStore store = open_store();
  const auto run = seed_running_run(store);
  const auto path = [](int round) { return "/ckpt/run-1/round-" + std::to_string(round) + ".fcp"; };
  const CheckpointRetention keep_two{2, 7000};
  std::vector<std::vector<std::string>> retired(6);
  for (int round = 1; round <= 5; ++round) {
    auto committed =
        store.commit_round(make_round(run, round), three_results(), make_checkpoint(path(round)),
                           {}, nullptr, keep_two, &retired[static_cast<std::size_t>(round)]);
    ASSERT_TRUE(committed) << committed.error().to_string();
  }
  // Each commit retires exactly the round that fell out of the newest two.
  EXPECT_TRUE(retired[1].empty());
  EXPECT_TRUE(retired[2].empty());
  EXPECT_EQ(retired[3], std::vector<std::string>{path(1)});
  EXPECT_EQ(retired[4], std::vector<std::string>{path(2)});
  EXPECT_EQ(retired[5], std::vector<std::string>{path(3)});

  auto checkpoints = store.list_checkpoints(run);
  ASSERT_TRUE(checkpoints);
  ASSERT_EQ(checkpoints->size(), 5u);  // the rows stay: the history still names every file
  for (const auto& c : *checkpoints) {
    EXPECT_EQ(c.removed_ms, c.round <= 3 ? std::optional<std::int64_t>(7000) : std::nullopt)
        << "round " << c.round;
  }
  EXPECT_EQ(*store.referenced_checkpoint_paths(), (std::vector<std::string>{path(4), path(5)}));
  EXPECT_EQ((*store.latest_checkpoint(run))->round, 5);

  // A refused commit retires nothing: the marks are in its rolled-back transaction.
  std::vector<std::string> none;
  EXPECT_FALSE(store.commit_round(make_round(run, 5), three_results(), make_checkpoint(path(6)), {},
                                  nullptr, CheckpointRetention{1, 8000}, &none));
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(*store.referenced_checkpoint_paths(), (std::vector<std::string>{path(4), path(5)}));

  // Without retention (keep_last 0) every file stays.
  std::vector<std::string> kept;
  ASSERT_TRUE(store.commit_round(make_round(run, 6), three_results(), make_checkpoint(path(6)), {},
                                 nullptr, CheckpointRetention{}, &kept));
  EXPECT_TRUE(kept.empty());
  EXPECT_EQ(store.referenced_checkpoint_paths()->size(), 3u);
}

TEST(HistoryRounds, MigrationFromVersion7KeepsEveryCheckpoint) {
  TempDir dir;
  const auto path = dir.path("history.db");
  {
    auto db = testing::database_at_version(path, 7);
    ASSERT_TRUE(db.exec(
        "INSERT INTO runs (name, config_json, state, rounds_total, last_round, created_ms, "
        "  updated_ms) VALUES ('old-run', '{}', 'running', 3, 1, 1, 2);"
        "INSERT INTO checkpoints (run_id, round, path, size_bytes, crc32, layout_fingerprint) "
        "  VALUES (1, 1, '/ckpt/run-1/round-1.fcp', 10, 7, 'ab');"));
  }
  auto store = HistoryStore::open(path);
  ASSERT_TRUE(store) << store.error().to_string();
  auto checkpoints = store->list_checkpoints(1);
  ASSERT_TRUE(checkpoints) << checkpoints.error().to_string();
  ASSERT_EQ(checkpoints->size(), 1u);
  EXPECT_FALSE((*checkpoints)[0].removed_ms.has_value()) << "a file from before stays kept";
  EXPECT_EQ(*store->referenced_checkpoint_paths(),
            std::vector<std::string>{"/ckpt/run-1/round-1.fcp"});
  SideConnection side(path);
  EXPECT_EQ(*schema_version(side.db()), kSchemaVersion);
  EXPECT_FALSE(side.db().exec("UPDATE checkpoints SET removed_ms = -1"));  // the new CHECK
}

TEST(HistoryRounds, APrivacyChargeReadsBackExactly) {
  HistoryStore store = open_store();
  const auto run = seed_running_run(store);
  RoundRecord failed = make_round(run, 1);
  failed.epsilon = 0.25;
  failed.dp_charge = DpCharge{1.0 / 3.0, {{0.1 / 3.0, 94}, {0.05, 60}}, std::nullopt};
  failed.failure_reason = "below quorum";
  ASSERT_TRUE(store.record_failed_round(failed, {}));
  RoundRecord committed = make_round(run, 1);
  committed.epsilon = 0.5;
  committed.dp_charge = DpCharge{1.1, {{1.0, 1}}, 0.123456789012345678};
  ASSERT_TRUE(store.commit_round(committed, three_results(), std::nullopt));
  auto rounds = store.list_rounds(run);
  ASSERT_TRUE(rounds) << rounds.error().message;
  ASSERT_EQ(rounds->size(), 2u);
  EXPECT_EQ((*rounds)[0].dp_charge, failed.dp_charge);  // doubles bit for bit
  EXPECT_EQ((*rounds)[1].dp_charge, committed.dp_charge);
  EXPECT_FALSE(make_round(run, 2).dp_charge.has_value());
}

TEST(HistoryRounds, EmptyRunHasNoRoundsAndUnknownRunsAreNotFound) {
  HistoryStore store = open_store();
  const auto run = seed_running_run(store);
  EXPECT_FALSE(store.last_committed_round(run)->has_value());
  EXPECT_TRUE(store.list_rounds(run)->empty());
  EXPECT_FALSE(store.latest_checkpoint(run)->has_value());
  EXPECT_EQ(store.list_client_results(run, 1).error().code, errc::not_found);
  for (const auto& e :
       {store.last_committed_round(99).error(), store.list_rounds(99).error(),
        store.latest_checkpoint(99).error(), store.list_client_results(99, 1).error()}) {
    EXPECT_EQ(e.code, errc::not_found);
    EXPECT_NE(e.message.find("run 99"), std::string::npos) << e.message;
  }
}

TEST(HistoryRounds, NanLossesSurviveAsNan) {
  HistoryStore store = open_store();
  const auto run = seed_running_run(store);
  RoundRecord round = make_round(run, 1);
  round.train_loss = std::nan("");
  round.eval_loss = std::nan("");  // an optional NaN reads back empty
  std::vector<ClientResult> results = {make_result("c1", 1)};
  results[0].loss = std::nan("");
  ASSERT_TRUE(store.commit_round(round, results, std::nullopt));
  auto read = *store.last_committed_round(run);
  EXPECT_TRUE(std::isnan(read->train_loss));
  EXPECT_FALSE(read->eval_loss.has_value());
  EXPECT_TRUE(std::isnan((*store.list_client_results(run, 1))[0].loss));
}

// Every refusal below must leave the file exactly as it was.
class HistoryRoundRefusals : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = open_store(path_);
    run_ = seed_running_run(store_, 5);
    ASSERT_TRUE(store_.commit_round(make_round(run_, 1), three_results(),
                                    make_checkpoint(dir_.path("round-1.ckpt"))));
  }

  // Rows after the one committed round of SetUp.
  void expect_nothing_more_written() {
    SideConnection side(path_);
    EXPECT_EQ(side.rounds(), 1);
    EXPECT_EQ(side.results(), 3);
    EXPECT_EQ(side.checkpoints(), 1);
    EXPECT_EQ(store_.get_run(run_)->last_round, 1);
    EXPECT_EQ(store_.list_rounds(run_)->size(), 1u);
  }

  void expect_refused(const result<RoundRecord>& r, errc code, const std::string& words) {
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, code) << r.error().to_string();
    EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().message;
    expect_nothing_more_written();
  }

  TempDir dir_;
  std::string path_ = dir_.path("history.db");
  HistoryStore store_ = open_store(":memory:");
  std::int64_t run_ = 0;
};

TEST_F(HistoryRoundRefusals, DuplicateRound) {
  expect_refused(store_.commit_round(make_round(run_, 1), three_results(),
                                     make_checkpoint(dir_.path("again.ckpt"))),
                 errc::failed_precondition, "next round is 2");
}

TEST_F(HistoryRoundRefusals, SkippedRound) {
  expect_refused(store_.commit_round(make_round(run_, 3), three_results(),
                                     make_checkpoint(dir_.path("round-3.ckpt"))),
                 errc::failed_precondition, "next round is 2");
}

TEST_F(HistoryRoundRefusals, BackwardsFailedRound) {
  expect_refused(store_.record_failed_round(make_round(run_, 1), three_results()),
                 errc::failed_precondition, "next round is 2");
}

TEST_F(HistoryRoundRefusals, UnknownRun) {
  expect_refused(store_.commit_round(make_round(run_ + 100, 1), three_results(),
                                     make_checkpoint(dir_.path("other.ckpt"))),
                 errc::not_found, std::to_string(run_ + 100));
}

TEST_F(HistoryRoundRefusals, FinishedRun) {
  ASSERT_TRUE(store_.set_run_state(run_, RunState::finished, "", 9000));
  expect_refused(store_.commit_round(make_round(run_, 2), three_results(), std::nullopt),
                 errc::failed_precondition, "finished");
}

TEST_F(HistoryRoundRefusals, PendingRun) {
  auto pending = store_.create_run("not started", "{}", 5, 1);
  ASSERT_TRUE(pending);
  auto r = store_.commit_round(make_round(pending->id, 1), three_results(), std::nullopt);
  expect_refused(r, errc::failed_precondition, "pending");
}

TEST_F(HistoryRoundRefusals, RoundBeyondTotal) {
  for (int round = 2; round <= 5; ++round) {
    ASSERT_TRUE(store_.commit_round(make_round(run_, round), {}, std::nullopt));
  }
  auto r = store_.commit_round(make_round(run_, 6), {}, std::nullopt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::failed_precondition);
  EXPECT_NE(r.error().message.find("only 5 rounds"), std::string::npos) << r.error().message;
}

// Atomicity: the second result violates the primary key after the checkpoint, the round
// and the first result were inserted; none of them may survive.
TEST_F(HistoryRoundRefusals, DuplicateClientResultWritesNothing) {
  const std::vector<ClientResult> results = {make_result("c1", 1), make_result("c1", 2)};
  expect_refused(
      store_.commit_round(make_round(run_, 2), results, make_checkpoint(dir_.path("r2.ckpt"))),
      errc::already_exists, "'c1'");
  EXPECT_EQ(*store_.referenced_checkpoint_paths(),
            std::vector<std::string>{dir_.path("round-1.ckpt")});
  EXPECT_EQ(store_.list_client_results(run_, 2).error().code, errc::not_found);
  // The round is still free to commit.
  ASSERT_TRUE(store_.commit_round(make_round(run_, 2), three_results(),
                                  make_checkpoint(dir_.path("r2.ckpt"))));
}

TEST_F(HistoryRoundRefusals, ResultOfUnknownClientWritesNothing) {
  const std::vector<ClientResult> results = {make_result("c1", 1), make_result("stranger", 2)};
  expect_refused(store_.commit_round(make_round(run_, 2), results, std::nullopt),
                 errc::failed_precondition, "FOREIGN KEY");
}

TEST_F(HistoryRoundRefusals, ReusedCheckpointPathWritesNothing) {
  expect_refused(store_.commit_round(make_round(run_, 2), three_results(),
                                     make_checkpoint(dir_.path("round-1.ckpt"))),
                 errc::already_exists, "round-1.ckpt");
}

TEST_F(HistoryRoundRefusals, NegativeCountsAreInvalid) {
  RoundRecord round = make_round(run_, 2);
  round.bytes_up = -5;
  expect_refused(store_.commit_round(round, {}, std::nullopt), errc::invalid_argument, "bytes_up");
}

TEST(HistoryRounds, FailedAttemptsThenCommitOfTheSameRound) {
  HistoryStore store = open_store();
  const auto run = seed_running_run(store);
  RoundRecord failure = make_round(run, 1);
  failure.failure_reason = "quorum not reached: 1 of 3 updates";
  const std::vector<ClientResult> partial = {make_result("c1", 1),
                                             make_result("c2", 2, ResultStatus::timeout)};

  auto first = store.record_failed_round(failure, partial);
  ASSERT_TRUE(first) << first.error().to_string();
  EXPECT_EQ(first->attempt, 1);
  EXPECT_EQ(first->state, RoundState::failed);
  EXPECT_EQ(store.get_run(run)->last_round, 0);
  EXPECT_FALSE(store.last_committed_round(run)->has_value());
  // Before any commit, the latest attempt's results are the default.
  EXPECT_EQ(store.list_client_results(run, 1)->size(), 2u);

  auto second = store.record_failed_round(failure, {});
  ASSERT_TRUE(second);
  EXPECT_EQ(second->attempt, 2);

  auto committed = store.commit_round(make_round(run, 1), three_results(), std::nullopt);
  ASSERT_TRUE(committed) << committed.error().to_string();
  EXPECT_EQ(committed->attempt, 3);
  EXPECT_EQ(store.get_run(run)->last_round, 1);

  auto rounds = store.list_rounds(run);
  ASSERT_EQ(rounds->size(), 3u);
  EXPECT_EQ((*rounds)[0].state, RoundState::failed);
  EXPECT_EQ((*rounds)[0].failure_reason, failure.failure_reason);
  EXPECT_EQ((*rounds)[1].state, RoundState::failed);
  EXPECT_EQ((*rounds)[2].state, RoundState::committed);
  EXPECT_EQ((*store.last_committed_round(run))->attempt, 3);

  EXPECT_EQ(store.list_client_results(run, 1)->size(), 3u);  // the committed attempt
  auto from_first = store.list_client_results(run, 1, 1);
  ASSERT_TRUE(from_first);
  ASSERT_EQ(from_first->size(), 2u);
  EXPECT_EQ((*from_first)[1].status, ResultStatus::timeout);
  EXPECT_TRUE(store.list_client_results(run, 1, 2)->empty());
  auto no_attempt = store.list_client_results(run, 1, 9);
  ASSERT_FALSE(no_attempt);
  EXPECT_EQ(no_attempt.error().code, errc::not_found);
  EXPECT_NE(no_attempt.error().message.find("attempt 9"), std::string::npos);

  // The next failure belongs to round 2.
  auto next = store.record_failed_round(make_round(run, 2), {});
  ASSERT_TRUE(next);
  EXPECT_EQ(next->attempt, 1);
}

// ---- Events

TEST(HistoryEvents, PagingVisitsEveryEventOnceInOrder) {
  HistoryStore store = open_store();
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 25; ++i) {
    EventRecord e;
    e.time_ms = 100 + i;
    e.kind = i % 2 == 0 ? "client_joined" : "round_committed";
    if (i % 2 == 1) {
      e.run_id = 7;
      e.round = i;
    } else {
      e.client_id = "c" + std::to_string(i);
    }
    e.detail_json = R"({"i":)" + std::to_string(i) + "}";
    auto id = store.append_event(e);
    ASSERT_TRUE(id) << id.error().to_string();
    ids.push_back(*id);
  }
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));

  std::vector<EventRecord> seen;
  std::int64_t after = 0;
  std::vector<std::size_t> page_sizes;
  for (;;) {
    auto page = store.list_events(after, 10);
    ASSERT_TRUE(page);
    page_sizes.push_back(page->size());
    if (page->empty()) {
      break;
    }
    after = page->back().id;
    seen.insert(seen.end(), page->begin(), page->end());
  }
  EXPECT_EQ(page_sizes, (std::vector<std::size_t>{10, 10, 5, 0}));
  ASSERT_EQ(seen.size(), 25u);
  for (int i = 0; i < 25; ++i) {
    EXPECT_EQ(seen[i].id, ids[i]);
    EXPECT_EQ(seen[i].time_ms, 100 + i);
    EXPECT_EQ(seen[i].detail_json, R"({"i":)" + std::to_string(i) + "}");
  }
  EXPECT_EQ(seen[1].run_id, 7);
  EXPECT_EQ(seen[1].round, 1);
  EXPECT_EQ(seen[1].client_id, "");
  EXPECT_FALSE(seen[0].run_id.has_value());
  EXPECT_FALSE(seen[0].round.has_value());
  EXPECT_EQ(seen[0].client_id, "c0");

  EXPECT_EQ(store.append_event({0, 1, "", {}, {}, "", "{}"}).error().code, errc::invalid_argument);
  EXPECT_EQ(store.append_event({0, 1, "k", {}, {}, "", "not json"}).error().code,
            errc::invalid_argument);
  EXPECT_EQ(store.list_events(0, 0).error().code, errc::invalid_argument);
}

// ---- Read-only connections

TEST(HistoryReadOnly, ReadsTheWritersDataButCannotWrite) {
  TempDir dir;
  const auto path = dir.path("history.db");
  HistoryStore writer = open_store(path);
  const auto run = seed_running_run(writer);
  ASSERT_TRUE(writer.commit_round(make_round(run, 1), three_results(), std::nullopt));

  auto reader = HistoryStore::open_read_only(path);
  ASSERT_TRUE(reader) << reader.error().to_string();
  EXPECT_EQ(reader->get_run(run)->last_round, 1);
  EXPECT_EQ(reader->list_client_results(run, 1)->size(), 3u);
  EXPECT_TRUE(*reader->integrity_check());

  // The reader sees the writer's later commits.
  ASSERT_TRUE(writer.commit_round(make_round(run, 2), three_results(), std::nullopt));
  EXPECT_EQ(reader->get_run(run)->last_round, 2);

  EXPECT_EQ(reader->upsert_client(make_client("c9")).error().code, errc::permission_denied);
  EXPECT_EQ(reader->set_client_online("c1", false, 1).error().code, errc::permission_denied);
  EXPECT_EQ(reader->create_run("r", "{}", 1, 1).error().code, errc::permission_denied);
  EXPECT_EQ(reader->set_run_state(run, RunState::stopped, "", 1).error().code,
            errc::permission_denied);
  EXPECT_EQ(reader->commit_round(make_round(run, 3), {}, std::nullopt).error().code,
            errc::permission_denied);
  EXPECT_EQ(reader->record_failed_round(make_round(run, 3), {}).error().code,
            errc::permission_denied);
  EXPECT_EQ(reader->append_event({0, 1, "k", {}, {}, "", "{}"}).error().code,
            errc::permission_denied);
  EXPECT_EQ(writer.get_run(run)->last_round, 2);
  EXPECT_EQ(writer.get_run(run)->state, RunState::running);
}

TEST(HistoryReadOnly, ClosedStoreOpensAndMissingFileIsNotFound) {
  TempDir dir;
  const auto path = dir.path("history.db");
  { open_store(path); }
  auto reader = HistoryStore::open_read_only(path);
  ASSERT_TRUE(reader) << reader.error().to_string();
  EXPECT_TRUE(reader->list_runs(10)->empty());
  auto missing = HistoryStore::open_read_only(dir.path("nope.db"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::not_found) << missing.error().to_string();
}

TEST(HistoryReadOnly, EmptyDatabaseIsNotAHistory) {
  TempDir dir;
  const auto path = dir.path("plain.db");
  {
    auto db = Database::open(path, OpenMode::read_write_create);
    ASSERT_TRUE(db && db->exec("CREATE TABLE t (v INTEGER)"));
  }
  auto reader = HistoryStore::open_read_only(path);
  ASSERT_FALSE(reader);
  EXPECT_EQ(reader.error().code, errc::failed_precondition);
  EXPECT_NE(reader.error().message.find("not a Fedcore history"), std::string::npos);
}

// ---- Hostile input

TEST(HistorySecurity, HostileStringsAreStoredVerbatim) {
  TempDir dir;
  const auto path = dir.path("history.db");
  HistoryStore store = open_store(path);
  const std::string evil_id = "x'); DROP TABLE runs;--";
  const std::string evil_name = "\"; DELETE FROM clients; SELECT '";
  ASSERT_TRUE(store.upsert_client(make_client(evil_id)));
  auto run = store.create_run(evil_name, R"({"note":"'); DROP TABLE rounds;--"})", 3, 1);
  ASSERT_TRUE(run);
  ASSERT_TRUE(store.set_run_state(run->id, RunState::running, "' OR 1=1 --", 2));
  std::vector<ClientResult> results = {make_result(evil_id, 1, ResultStatus::dropped)};
  results[0].reason = "'; UPDATE runs SET last_round = 99; --";
  ASSERT_TRUE(store.commit_round(make_round(run->id, 1), results, std::nullopt));
  ASSERT_TRUE(store.append_event({0, 3, "x'); DROP TABLE events;--", {}, {}, evil_id, "{}"}));

  EXPECT_EQ(store.get_client(evil_id)->id, evil_id);
  EXPECT_EQ(store.get_client(evil_id)->rounds_joined, 0);
  EXPECT_EQ(store.get_run(run->id)->name, evil_name);
  EXPECT_EQ(store.get_run(run->id)->error, "' OR 1=1 --");
  EXPECT_EQ(store.get_run(run->id)->last_round, 1);
  auto read = store.list_client_results(run->id, 1);
  ASSERT_EQ(read->size(), 1u);
  EXPECT_EQ((*read)[0].client_id, evil_id);
  EXPECT_EQ((*read)[0].reason, results[0].reason);
  EXPECT_EQ((*store.list_events(0, 10))[0].kind, "x'); DROP TABLE events;--");
  EXPECT_EQ(store.list_clients()->size(), 1u);

  SideConnection side(path);
  EXPECT_EQ(side.count("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN "
                       "('clients', 'runs', 'rounds', 'client_results', 'checkpoints', 'events')"),
            6);
  EXPECT_TRUE(*store.integrity_check());
}

// ---- Concurrency

TEST(HistoryConcurrency, HeldWriteLockGivesUnavailableAfterBusyTimeout) {
  TempDir dir;
  const auto path = dir.path("history.db");
  HistoryStore store = open_store(path, StoreOptions{std::chrono::milliseconds(50)});
  const auto run = seed_running_run(store);

  SideConnection other(path);
  {
    auto lock = Transaction::begin(other.db(), TransactionMode::immediate);
    ASSERT_TRUE(lock);
    auto commit = store.commit_round(make_round(run, 1), three_results(), std::nullopt);
    ASSERT_FALSE(commit);
    EXPECT_EQ(commit.error().code, errc::unavailable) << commit.error().to_string();
    auto client = store.upsert_client(make_client("c4"));
    ASSERT_FALSE(client);
    EXPECT_EQ(client.error().code, errc::unavailable);
    // Readers are not blocked by a writer in WAL mode.
    EXPECT_EQ(store.get_run(run)->last_round, 0);
  }
  ASSERT_TRUE(store.commit_round(make_round(run, 1), three_results(), std::nullopt));
  EXPECT_EQ(store.get_run(run)->last_round, 1);
}

}  // namespace
}  // namespace fedcore::store
