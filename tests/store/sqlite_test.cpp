#include "server/store/sqlite.hpp"

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <limits>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "tests/temp_dir.hpp"

namespace fedcore::store {
namespace {

Database memory_db() {
  return std::move(Database::open(":memory:", OpenMode::read_write_create).value());
}

TEST(Sqlite, ErrorCodesMapToFedcoreCodes) {
  EXPECT_EQ(errc_from_sqlite(SQLITE_BUSY), errc::unavailable);
  EXPECT_EQ(errc_from_sqlite(SQLITE_BUSY_SNAPSHOT), errc::unavailable);
  EXPECT_EQ(errc_from_sqlite(SQLITE_LOCKED), errc::unavailable);
  EXPECT_EQ(errc_from_sqlite(SQLITE_FULL), errc::io_error);
  EXPECT_EQ(errc_from_sqlite(SQLITE_IOERR_FSYNC), errc::io_error);
  EXPECT_EQ(errc_from_sqlite(SQLITE_CORRUPT), errc::data_loss);
  EXPECT_EQ(errc_from_sqlite(SQLITE_NOTADB), errc::data_loss);
  EXPECT_EQ(errc_from_sqlite(SQLITE_CONSTRAINT_PRIMARYKEY), errc::already_exists);
  EXPECT_EQ(errc_from_sqlite(SQLITE_CONSTRAINT_UNIQUE), errc::already_exists);
  EXPECT_EQ(errc_from_sqlite(SQLITE_CONSTRAINT_FOREIGNKEY), errc::failed_precondition);
  EXPECT_EQ(errc_from_sqlite(SQLITE_CONSTRAINT_CHECK), errc::failed_precondition);
  EXPECT_EQ(errc_from_sqlite(SQLITE_CONSTRAINT_NOTNULL), errc::failed_precondition);
  EXPECT_EQ(errc_from_sqlite(SQLITE_READONLY), errc::permission_denied);
  EXPECT_EQ(errc_from_sqlite(SQLITE_CANTOPEN, ENOENT), errc::not_found);
  EXPECT_EQ(errc_from_sqlite(SQLITE_CANTOPEN, EACCES), errc::permission_denied);
  EXPECT_EQ(errc_from_sqlite(SQLITE_CANTOPEN, EIO), errc::io_error);
  EXPECT_EQ(errc_from_sqlite(SQLITE_NOMEM), errc::resource_exhausted);
  EXPECT_EQ(errc_from_sqlite(SQLITE_TOOBIG), errc::resource_exhausted);
  EXPECT_EQ(errc_from_sqlite(SQLITE_INTERRUPT), errc::aborted);
  EXPECT_EQ(errc_from_sqlite(SQLITE_RANGE), errc::invalid_argument);
  EXPECT_EQ(errc_from_sqlite(SQLITE_ERROR), errc::internal);
  EXPECT_EQ(errc_from_sqlite(SQLITE_MISUSE), errc::internal);
}

TEST(Sqlite, BindsAndReadsEveryType) {
  Database db = memory_db();
  ASSERT_TRUE(db.exec("CREATE TABLE t (i INTEGER, d REAL, s TEXT, b BLOB, n INTEGER)"));
  auto insert = db.prepare("INSERT INTO t VALUES (?1, ?2, ?3, ?4, ?5)");
  ASSERT_TRUE(insert) << insert.error().to_string();

  const std::string text("it's \"quoted\"\0with a NUL", 25);
  const std::vector<std::byte> blob = {std::byte{0}, std::byte{0xff}, std::byte{0x27}};
  insert->bind_int64(1, std::numeric_limits<std::int64_t>::min())
      .bind_double(2, -1.25e-300)
      .bind_text(3, text)
      .bind_blob(4, blob)
      .bind_null(5);
  ASSERT_TRUE(insert->run());
  insert->reset();
  insert->bind_int64(1, std::numeric_limits<std::int64_t>::max())
      .bind_double(2, std::numeric_limits<double>::quiet_NaN())
      .bind_text(3, "")
      .bind_blob(4, {})
      .bind_int64(5, 7);
  ASSERT_TRUE(insert->run());
  EXPECT_EQ(db.changes(), 1);
  EXPECT_EQ(db.last_insert_rowid(), 2);

  auto select = db.prepare("SELECT i, d, s, b, n FROM t ORDER BY rowid");
  ASSERT_TRUE(select);
  ASSERT_EQ(*select->step(), StepResult::row);
  EXPECT_EQ(select->column_int64(0), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(select->column_double(1), -1.25e-300);
  EXPECT_EQ(select->column_text(2), text);
  EXPECT_EQ(select->column_blob(3), blob);
  EXPECT_TRUE(select->column_is_null(4));
  EXPECT_EQ(select->column_int64(4), 0);

  ASSERT_EQ(*select->step(), StepResult::row);
  EXPECT_EQ(select->column_int64(0), std::numeric_limits<std::int64_t>::max());
  EXPECT_TRUE(select->column_is_null(1)) << "SQLite stores NaN as NULL";
  EXPECT_FALSE(select->column_is_null(2)) << "an empty string is not NULL";
  EXPECT_EQ(select->column_text(2), "");
  EXPECT_FALSE(select->column_is_null(3)) << "an empty blob is not NULL";
  EXPECT_TRUE(select->column_blob(3).empty());
  EXPECT_EQ(select->column_int64(4), 7);
  EXPECT_EQ(*select->step(), StepResult::done);
}

TEST(Sqlite, BindErrorIsReportedByStep) {
  Database db = memory_db();
  auto s = db.prepare("SELECT ?1");
  ASSERT_TRUE(s);
  s->bind_int64(3, 1);  // no parameter 3
  auto stepped = s->step();
  ASSERT_FALSE(stepped);
  EXPECT_EQ(stepped.error().code, errc::invalid_argument);
  EXPECT_NE(stepped.error().message.find("parameter 3"), std::string::npos)
      << stepped.error().message;
  s->reset();  // clears the remembered error
  s->bind_int64(1, 5);
  ASSERT_EQ(*s->step(), StepResult::row);
  EXPECT_EQ(s->column_int64(0), 5);
}

TEST(Sqlite, ConstraintErrorsCarrySqliteMessageAndExtendedCode) {
  Database db = memory_db();
  ASSERT_TRUE(db.exec("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER CHECK (v > 0))"));
  auto s = db.prepare("INSERT INTO t VALUES (?1, ?2)");
  ASSERT_TRUE(s);
  s->bind_text(1, "a").bind_int64(2, 1);
  ASSERT_TRUE(s->run());
  s->reset();
  s->bind_text(1, "a").bind_int64(2, 1);
  auto duplicate = s->run();
  ASSERT_FALSE(duplicate);
  EXPECT_EQ(duplicate.error().code, errc::already_exists);
  EXPECT_NE(duplicate.error().message.find("UNIQUE constraint failed: t.k"), std::string::npos)
      << duplicate.error().message;
  EXPECT_NE(duplicate.error().message.find("1555"), std::string::npos) << duplicate.error().message;

  s->reset();
  s->bind_text(1, "b").bind_int64(2, -1);
  auto check = s->run();
  ASSERT_FALSE(check);
  EXPECT_EQ(check.error().code, errc::failed_precondition);
  EXPECT_NE(check.error().message.find("CHECK constraint failed"), std::string::npos);
  EXPECT_NE(check.error().message.find("275"), std::string::npos) << check.error().message;
}

TEST(Sqlite, BadSqlIsAnInternalError) {
  Database db = memory_db();
  auto s = db.prepare("SELEC 1");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, errc::internal);
  EXPECT_NE(s.error().message.find("SELEC 1"), std::string::npos) << s.error().message;
  auto e = db.exec("SELECT * FROM no_such_table");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, errc::internal);
  EXPECT_NE(e.error().message.find("no_such_table"), std::string::npos);
}

TEST(Sqlite, TransactionRollsBackUnlessCommitted) {
  Database db = memory_db();
  ASSERT_TRUE(db.exec("CREATE TABLE t (v INTEGER)"));
  auto count = [&db] {
    auto s = db.prepare("SELECT count(*) FROM t");
    EXPECT_EQ(*s->step(), StepResult::row);
    return s->column_int64(0);
  };
  {
    auto tx = Transaction::begin(db, TransactionMode::immediate);
    ASSERT_TRUE(tx) << tx.error().to_string();
    EXPECT_TRUE(db.in_transaction());
    auto nested = Transaction::begin(db);
    ASSERT_FALSE(nested);
    EXPECT_EQ(nested.error().code, errc::internal);
    ASSERT_TRUE(db.exec("INSERT INTO t VALUES (1)"));
    EXPECT_EQ(count(), 1);
  }
  EXPECT_FALSE(db.in_transaction());
  EXPECT_EQ(count(), 0);
  {
    auto tx = Transaction::begin(db, TransactionMode::deferred);
    ASSERT_TRUE(tx);
    ASSERT_TRUE(db.exec("INSERT INTO t VALUES (2)"));
    Transaction moved = std::move(*tx);  // the moved-from one must not roll back
    ASSERT_TRUE(moved.commit());
  }
  EXPECT_EQ(count(), 1);
}

TEST(Sqlite, MovedDatabaseHasOneOwner) {
  Database a = memory_db();
  ASSERT_TRUE(a.exec("CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (42)"));
  Database b = std::move(a);
  auto s = b.prepare("SELECT v FROM t");
  ASSERT_TRUE(s);
  ASSERT_EQ(*s->step(), StepResult::row);
  EXPECT_EQ(s->column_int64(0), 42);
  Statement moved = std::move(*s);
  EXPECT_EQ(moved.column_int64(0), 42);
  a = std::move(b);  // move-assign back; b is left empty and closes nothing
  EXPECT_TRUE(a.exec("SELECT 1"));
}

// A statement is compiled once per connection and text: destroyed, it waits in the cache,
// reset (no read left open) and unbound; the next prepare of the same text takes it.
// Two in use at once are two statements, and both come back.
TEST(Sqlite, AStatementGoesBackToItsConnectionsCacheResetAndUnbound) {
  fedcore::testing::TempDir dir;
  const auto path = dir.path("cache.db");
  auto db = Database::open(path, OpenMode::read_write_create);
  ASSERT_TRUE(db) << db.error().message;
  ASSERT_TRUE(
      db->exec("PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER);"
               "INSERT INTO t VALUES (1), (2), (3)"));
  EXPECT_EQ(db->cached_statements(), 0u);
  {
    auto s = db->prepare("SELECT v FROM t WHERE v >= ?1 ORDER BY v");
    ASSERT_TRUE(s) << s.error().message;
    s->bind_int64(1, 2);
    ASSERT_EQ(*s->step(), StepResult::row);  // a read left open mid-way
    EXPECT_EQ(s->column_int64(0), 2);
  }
  EXPECT_EQ(db->cached_statements(), 1u);
  // The read it held is over: another connection can checkpoint the whole log (a reader
  // still on it would make the checkpoint report busy, its first column).
  auto other = Database::open(path, OpenMode::read_write);
  ASSERT_TRUE(other) << other.error().message;
  ASSERT_TRUE(other->exec("INSERT INTO t VALUES (4)"));
  {
    auto checkpoint = other->prepare("PRAGMA wal_checkpoint(TRUNCATE)");
    ASSERT_TRUE(checkpoint) << checkpoint.error().message;
    ASSERT_EQ(*checkpoint->step(), StepResult::row);
    EXPECT_EQ(checkpoint->column_int64(0), 0) << "a cached statement still reads the log";
  }
  {
    auto again = db->prepare("SELECT v FROM t WHERE v >= ?1 ORDER BY v");
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_EQ(db->cached_statements(), 0u);  // taken, not compiled anew
    // Unbound: ?1 is NULL, and nothing is >= NULL.
    EXPECT_EQ(*again->step(), StepResult::done);
    auto twin = db->prepare("SELECT v FROM t WHERE v >= ?1 ORDER BY v");
    ASSERT_TRUE(twin) << twin.error().message;
    twin->bind_int64(1, 4);
    ASSERT_EQ(*twin->step(), StepResult::row);
    EXPECT_EQ(twin->column_int64(0), 4);
  }
  EXPECT_EQ(db->cached_statements(), 2u);
}

TEST(Sqlite, OpenReportsMissingFilesAsNotFound) {
  fedcore::testing::TempDir dir;
  auto missing = Database::open(dir.path("absent.db"), OpenMode::read_only);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::not_found) << missing.error().to_string();
  EXPECT_NE(missing.error().message.find("absent.db"), std::string::npos);
  auto no_dir = Database::open(dir.path("no/such/dir/x.db"), OpenMode::read_write_create);
  ASSERT_FALSE(no_dir);
  EXPECT_EQ(no_dir.error().code, errc::not_found) << no_dir.error().to_string();
}

TEST(Sqlite, ReadOnlyConnectionRefusesWrites) {
  fedcore::testing::TempDir dir;
  {
    auto db = Database::open(dir.path("x.db"), OpenMode::read_write_create);
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->exec("CREATE TABLE t (v INTEGER)"));
  }
  auto db = Database::open(dir.path("x.db"), OpenMode::read_only);
  ASSERT_TRUE(db);
  auto write = db->exec("INSERT INTO t VALUES (1)");
  ASSERT_FALSE(write);
  EXPECT_EQ(write.error().code, errc::permission_denied) << write.error().to_string();
}

// Another connection's write lock: with no budget the statement fails at once; with one
// it waits (at least the budget, polling) and then fails with unavailable; once the lock
// is given back it goes through.
TEST(Sqlite, AStatementWaitsForAnotherConnectionsLockUpToItsBudget) {
  fedcore::testing::TempDir dir;
  const auto path = dir.path("lock.db");
  auto holder = Database::open(path, OpenMode::read_write_create);
  ASSERT_TRUE(holder) << holder.error().message;
  ASSERT_TRUE(holder->exec("PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER)"));
  auto waiter = Database::open(path, OpenMode::read_write);
  ASSERT_TRUE(waiter) << waiter.error().message;
  ASSERT_TRUE(holder->exec("BEGIN IMMEDIATE"));

  waiter->set_busy_timeout(std::chrono::milliseconds(0));
  auto refused = waiter->exec("INSERT INTO t VALUES (1)");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::unavailable) << refused.error().to_string();

  const auto budget = std::chrono::milliseconds(30);
  waiter->set_busy_timeout(budget);
  const auto started = std::chrono::steady_clock::now();
  auto waited = waiter->exec("INSERT INTO t VALUES (2)");
  const auto elapsed = std::chrono::steady_clock::now() - started;
  ASSERT_FALSE(waited);
  EXPECT_EQ(waited.error().code, errc::unavailable) << waited.error().to_string();
  EXPECT_GE(elapsed, budget);
  EXPECT_LT(elapsed, std::chrono::seconds(10));

  ASSERT_TRUE(holder->exec("COMMIT"));
  EXPECT_TRUE(waiter->exec("INSERT INTO t VALUES (3)"));
}

}  // namespace
}  // namespace fedcore::store
