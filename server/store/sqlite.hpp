// Thin RAII wrappers over the SQLite C API: a connection (`Database`), a prepared
// statement (`Statement`) and a write transaction (`Transaction`). They add no policy of
// their own beyond turning every SQLite failure into a `fedcore::error`; the schema and
// the domain operations live in schema.hpp and history_store.hpp.
//
// Values never enter SQL text. Statements and `exec` take an `Sql`, which can only be
// built from a constant expression (a string literal), so the only way to put a value
// into a statement is to bind it to a `?` parameter.
//
// Error mapping (`errc_from_sqlite`), by primary result code:
//   SQLITE_BUSY, SQLITE_LOCKED, SQLITE_PROTOCOL    -> errc::unavailable (after busy_timeout)
//   SQLITE_FULL, SQLITE_IOERR, SQLITE_NOLFS        -> errc::io_error
//   SQLITE_CORRUPT, SQLITE_NOTADB                  -> errc::data_loss
//   SQLITE_CONSTRAINT: PRIMARYKEY, UNIQUE          -> errc::already_exists
//                      any other constraint        -> errc::failed_precondition
//   SQLITE_READONLY, SQLITE_PERM, SQLITE_AUTH      -> errc::permission_denied
//   SQLITE_CANTOPEN    -> errc::not_found (ENOENT), permission_denied (EACCES), io_error
//   SQLITE_NOMEM, SQLITE_TOOBIG                    -> errc::resource_exhausted
//   SQLITE_INTERRUPT, SQLITE_ABORT                 -> errc::aborted
//   SQLITE_MISMATCH, SQLITE_RANGE                  -> errc::invalid_argument
//   anything else (SQL errors, misuse)             -> errc::internal
// Messages carry SQLite's own sentence and the extended result code, e.g.
//   "insert client result: UNIQUE constraint failed: client_results.client_id
//    (sqlite extended code 1555)".
//
// Thread safety: a Database and its Statements belong to one thread at a time (the
// connection is opened with SQLITE_OPEN_NOMUTEX). Distinct Databases, even on the same
// file, may be used from different threads or processes; SQLite's file locking
// serialises writers.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shared/util/error.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace fedcore::store {

// SQL text fixed at compile time. The constructor is consteval and implicit, so
// `db.prepare("SELECT ... WHERE id = ?")` compiles while `db.prepare(text.c_str())`
// does not: values must be bound, never concatenated.
class Sql {
 public:
  consteval Sql(const char* text) : text_(text) {}  // NOLINT(google-explicit-constructor)
  constexpr const char* c_str() const noexcept { return text_; }

 private:
  const char* text_;
};

// The fedcore code for an SQLite (extended) result code; `system_errno` refines
// SQLITE_CANTOPEN. The full table is at the top of this file.
[[nodiscard]] errc errc_from_sqlite(int extended_code, int system_errno = 0) noexcept;

enum class OpenMode {
  read_only,          // SQLITE_OPEN_READONLY: every write fails with permission_denied
  read_write,         // the file must exist
  read_write_create,  // created if missing
};

class Statement;

// One connection. Move-only; closing happens in the destructor (sqlite3_close_v2, so a
// forgotten Statement cannot make it fail). Extended result codes are enabled.
class Database {
 public:
  // Opens `path` (":memory:" for a private in-memory database). Errors: as mapped above,
  // typically not_found (missing file or directory), permission_denied, io_error.
  static result<Database> open(const std::string& path, OpenMode mode);

  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  ~Database();

  // Runs fixed SQL (several statements allowed; result rows are discarded).
  result<void> exec(Sql sql);
  // Compiles one statement, or takes it compiled from an earlier use: a Statement of this
  // Database goes back to the connection's cache when destroyed (reset, its parameters
  // unbound), keyed by its SQL text, so a statement the store runs every round is compiled
  // once. Errors: errc::internal for SQL errors (a bug), or as mapped. The Statement must
  // not outlive this Database.
  result<Statement> prepare(Sql sql);
  // Compiled statements waiting in the cache (for tests).
  std::size_t cached_statements() const noexcept;

  // How long a statement waits for another connection's lock before failing with
  // errc::unavailable. It polls every 25 µs for the first 2 ms of a wait, then every
  // millisecond: another connection of this process (the server's round commits on its
  // writer thread) holds the lock for well under a millisecond, where SQLite's own
  // handler would sleep a whole one at the first conflict.
  void set_busy_timeout(std::chrono::milliseconds timeout) noexcept;

  // Rowid of the last successful INSERT on this connection.
  std::int64_t last_insert_rowid() const noexcept;
  // Rows changed by the last INSERT, UPDATE or DELETE on this connection.
  std::int64_t changes() const noexcept;
  // True while a transaction is open on this connection.
  bool in_transaction() const noexcept;
  const std::string& path() const noexcept { return path_; }

 private:
  struct StatementCache;
  Database(sqlite3* db, std::string path);
  void close() noexcept;

  sqlite3* db_ = nullptr;
  std::string path_;
  // On the heap: Statements keep their way back to it while the Database moves.
  std::unique_ptr<StatementCache> cache_;

  friend class Transaction;
  friend class Statement;
};

enum class StepResult { row, done };

// A prepared statement. Parameters are numbered from 1 (SQLite's convention), columns
// from 0. Move-only; the destructor resets it and gives it back to its Database's cache.
//
// Binding never fails on the spot: the first bind error (an index out of range, a value
// over SQLite's size limit) is remembered and returned by the next step() or run(), so a
// run of binds is checked once.
class Statement {
 public:
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  Statement& bind_int64(int index, std::int64_t value) noexcept;
  // NaN is stored as NULL (SQLite has no NaN).
  Statement& bind_double(int index, double value) noexcept;
  Statement& bind_text(int index, std::string_view value) noexcept;            // copied by SQLite
  Statement& bind_blob(int index, std::span<const std::byte> value) noexcept;  // copied
  Statement& bind_null(int index) noexcept;

  // Advances to the next row (StepResult::row) or to the end (StepResult::done).
  result<StepResult> step();
  // Steps until done, discarding rows: for INSERT, UPDATE and DELETE.
  result<void> run();
  // Back to before the first step, with every parameter unbound (NULL) and any remembered
  // bind error cleared, ready to be bound and run again.
  void reset() noexcept;

  // Column getters; valid only after step() returned StepResult::row. NULL reads as 0,
  // 0.0, an empty string or an empty blob; ask column_is_null() when that matters.
  bool column_is_null(int column) const noexcept;
  std::int64_t column_int64(int column) const noexcept;
  double column_double(int column) const noexcept;
  std::string column_text(int column) const;
  std::vector<std::byte> column_blob(int column) const;

 private:
  Statement(sqlite3_stmt* stmt, Database::StatementCache* cache, const char* key) noexcept
      : stmt_(stmt), cache_(cache), key_(key) {}
  void note_bind(int rc, int index) noexcept;
  // Resets the statement and hands it to the cache (or finalizes it without one).
  void give_back() noexcept;

  sqlite3_stmt* stmt_ = nullptr;
  Database::StatementCache* cache_ = nullptr;
  const char* key_ = nullptr;  // its SQL text, the cache's key
  int bind_rc_ = 0;            // first failed bind (SQLITE_OK if none)
  int bind_index_ = 0;

  friend class Database;
};

enum class TransactionMode {
  deferred,   // BEGIN DEFERRED: takes locks on first use
  immediate,  // BEGIN IMMEDIATE: takes the write lock now, waiting up to busy_timeout
  exclusive,  // BEGIN EXCLUSIVE
};

// A transaction on one Database, rolled back unless commit() succeeded. Move-only; the
// Database must outlive it. The destructor rolls back and swallows any error (a failed
// rollback leaves nothing to report to: SQLite has already abandoned the transaction).
class Transaction {
 public:
  // Errors: errc::unavailable when another connection holds the write lock past the busy
  // timeout; errc::internal when a transaction is already open on `db`.
  static result<Transaction> begin(Database& db, TransactionMode mode = TransactionMode::immediate);

  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  // Makes the changes durable. On failure the transaction is rolled back (now or by the
  // destructor) and nothing of it is visible. REQUIRES: not yet committed.
  result<void> commit();

 private:
  explicit Transaction(sqlite3* db) noexcept : db_(db) {}

  sqlite3* db_;  // null once committed or moved from
};

}  // namespace fedcore::store
