// The history's admin-access tables (schema version 4): the migration from version 3
// keeps what was there, API tokens are stored as hashes with unique names, and the audit
// trail pages newest first.
#include <gtest/gtest.h>

#include "server/store/history_store.hpp"
#include "server/store/schema.hpp"
#include "tests/store/store_fixtures.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::store {
namespace {

using fedcore::testing::TempDir;
using testing::make_client;
using testing::SideConnection;

ApiTokenRecord token(const std::string& name, char hash_digit) {
  ApiTokenRecord t;
  t.name = name;
  t.role = "read";
  t.sha256_hex = std::string(64, hash_digit);
  t.created_ms = 10;
  t.created_by = "config";
  return t;
}

TEST(HistoryAccess, MigrationFromVersion3KeepsTheHistory) {
  TempDir dir;
  const auto path = dir.path("history.db");
  {
    // A database as a version-3 Fedcore left it: migrations 1..3 and some history.
    auto db = testing::database_at_version(path, 3);
    ASSERT_TRUE(
        db.exec("INSERT INTO runs (name, config_json, state, rounds_total, created_ms, updated_ms) "
                "VALUES ('old-run', '{}', 'finished', 2, 1, 2);"
                "INSERT INTO events (time_ms, kind) VALUES (3, 'run_started');"));
  }
  auto store = HistoryStore::open(path);
  ASSERT_TRUE(store) << store.error().to_string();
  auto runs = store->list_runs(10);
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].name, "old-run");
  EXPECT_EQ((*runs)[0].state, RunState::finished);
  EXPECT_EQ(store->list_events(0, 10)->size(), 1u);
  // The new tables are there, empty, and usable.
  EXPECT_TRUE(store->list_api_tokens()->empty());
  EXPECT_TRUE(store->list_audit(std::nullopt, 10)->empty());
  ASSERT_TRUE(store->create_api_token(token("a", 'a')));
  ASSERT_TRUE(store->append_audit({0, 5, "a", 1, "read", "::1", "POST", "/x", 403, "{}"}));
  EXPECT_TRUE(*store->integrity_check());
  SideConnection side(path);
  EXPECT_EQ(*schema_version(side.db()), kSchemaVersion);  // and on to the newest
}

TEST(HistoryAccess, TokensAreStoredByHashWithUniqueNames) {
  auto store = std::move(HistoryStore::open(":memory:").value());
  auto a = store.create_api_token(token("alice", 'a'));
  ASSERT_TRUE(a) << a.error().to_string();
  EXPECT_EQ(a->id, 1);
  auto b = token("bob", 'b');
  b.role = "admin";
  b.expires_ms = 99;
  ASSERT_TRUE(store.create_api_token(b));
  EXPECT_EQ(store.create_api_token(token("alice", 'c')).error().code, errc::already_exists);
  EXPECT_EQ(store.create_api_token(token("carol", 'a')).error().code, errc::already_exists);
  auto bad = token("dave", 'd');
  bad.role = "root";
  EXPECT_EQ(store.create_api_token(bad).error().code, errc::invalid_argument);
  bad = token("dave", 'D');
  EXPECT_EQ(store.create_api_token(bad).error().code, errc::invalid_argument);
  bad = token("", 'd');
  EXPECT_EQ(store.create_api_token(bad).error().code, errc::invalid_argument);

  auto found = store.find_api_token(std::string(64, 'b'));
  ASSERT_TRUE(found && found->has_value());
  EXPECT_EQ((*found)->name, "bob");
  EXPECT_EQ((*found)->expires_ms, 99);
  EXPECT_FALSE(store.find_api_token(std::string(64, 'e'))->has_value());

  auto revoked = store.revoke_api_token(1, 500);
  ASSERT_TRUE(revoked);
  EXPECT_EQ(revoked->revoked_ms, 500);
  EXPECT_EQ(store.revoke_api_token(1, 600)->revoked_ms, 500);  // the first time stays
  EXPECT_EQ(store.revoke_api_token(7, 600).error().code, errc::not_found);
  auto all = store.list_api_tokens();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].revoked_ms, 500);
  EXPECT_FALSE((*all)[1].revoked_ms);
}

TEST(HistoryAccess, TheAuditTrailPagesNewestFirst) {
  auto store = std::move(HistoryStore::open(":memory:").value());
  for (int i = 1; i <= 5; ++i) {
    AuditRecord row{0,       i,
                    "t",     std::nullopt,
                    "admin", "10.0.0.1",
                    "POST",  "/api/v1/runs",
                    201,     R"({"n":)" + std::to_string(i) + "}"};
    ASSERT_EQ(*store.append_audit(row), i);
  }
  auto page = store.list_audit(std::nullopt, 2);
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].id, 5);
  EXPECT_EQ((*page)[0].detail_json, R"({"n":5})");
  EXPECT_FALSE((*page)[0].token_id);
  page = store.list_audit(4, 10);
  ASSERT_EQ(page->size(), 3u);
  EXPECT_EQ((*page)[0].id, 3);
  EXPECT_EQ((*page)[2].id, 1);
  EXPECT_EQ(store.list_audit(std::nullopt, 0).error().code, errc::invalid_argument);
  AuditRecord bad{0, 1, "", std::nullopt, "", "", "", "/", 200, "{}"};
  EXPECT_EQ(store.append_audit(bad).error().code, errc::invalid_argument);
  bad.method = "GET";
  bad.status = 42;
  EXPECT_EQ(store.append_audit(bad).error().code, errc::invalid_argument);
  bad.status = 401;
  bad.detail_json = "{";
  EXPECT_EQ(store.append_audit(bad).error().code, errc::invalid_argument);
}

TEST(HistoryAccess, PruningTheAuditTrailKeepsItsNewestRows) {
  auto store = std::move(HistoryStore::open(":memory:").value());
  for (int i = 1; i <= 10; ++i) {
    ASSERT_TRUE(store.append_audit({0, i, "", std::nullopt, "", "::1", "POST", "/", 401, "{}"}));
  }
  EXPECT_EQ(*store.prune_audit(4), 6);
  auto rows = store.list_audit(std::nullopt, 100);
  ASSERT_EQ(rows->size(), 4u);
  EXPECT_EQ(rows->front().id, 10);
  EXPECT_EQ(rows->back().id, 7);
  EXPECT_EQ(*store.prune_audit(4), 0) << "nothing more to remove";
  // Ids go on from the highest ever given, so pruning never makes an id reappear.
  EXPECT_EQ(*store.append_audit({0, 11, "", std::nullopt, "", "::1", "POST", "/", 401, "{}"}), 11);
  EXPECT_EQ(store.prune_audit(0).error().code, errc::invalid_argument);
}

}  // namespace
}  // namespace fedcore::store
