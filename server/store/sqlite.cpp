#include "server/store/sqlite.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <thread>
#include <unordered_map>
#include <utility>

#include <sqlite3.h>

#include "shared/util/assert.hpp"

namespace fedcore::store {
namespace {

// SQLite's error for the last call on `db`, as a fedcore::error. `rc` is what the call
// returned; the connection's own extended code is preferred when it describes the same
// failure, because sqlite3_open_v2 and sqlite3_exec return only primary codes.
error failure(sqlite3* db, int rc, const std::string& what) {
  int code = rc;
  int system_errno = 0;
  std::string message = what;
  if (!message.empty()) {
    message += ": ";
  }
  if (db != nullptr) {
    const int extended = sqlite3_extended_errcode(db);
    if ((extended & 0xff) == (rc & 0xff)) {
      code = extended;
    }
    system_errno = sqlite3_system_errno(db);
    message += sqlite3_errmsg(db);
  } else {
    message += sqlite3_errstr(rc);
  }
  message += " (sqlite extended code ";
  message += std::to_string(code);
  message += ")";
  return fail(errc_from_sqlite(code, system_errno), std::move(message));
}

bool only_whitespace(const char* text) noexcept {
  for (; *text != '\0'; ++text) {
    if (std::isspace(static_cast<unsigned char>(*text)) == 0) {
      return false;
    }
  }
  return true;
}

// The busy handler of every connection (Database::set_busy_timeout): `tries` is how
// often it was called in this wait, so the time waited is known from the steps alone.
// Returning 0 gives up (the statement fails with SQLITE_BUSY).
int wait_for_lock(void* budget_ms, int tries) {
  using std::chrono::microseconds;
  constexpr int kFineTries = 80;
  constexpr microseconds kFineStep{25};
  constexpr microseconds kCoarseStep{1000};
  const auto budget = microseconds(reinterpret_cast<std::intptr_t>(budget_ms) * 1000);  // NOLINT
  const bool fine = tries < kFineTries;
  const auto waited =
      fine ? kFineStep * tries : kFineStep * kFineTries + kCoarseStep * (tries - kFineTries);
  if (waited >= budget) {
    return 0;
  }
  std::this_thread::sleep_for(fine ? kFineStep : kCoarseStep);
  return 1;
}

}  // namespace

errc errc_from_sqlite(int extended_code, int system_errno) noexcept {
  switch (extended_code & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
      return errc::ok;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_PROTOCOL:
      return errc::unavailable;
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_NOLFS:
      return errc::io_error;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return errc::data_loss;
    case SQLITE_CONSTRAINT:
      // A key that is already taken is "already exists"; a failed CHECK, NOT NULL or
      // foreign key means the database is not in the state the write needs.
      if (extended_code == SQLITE_CONSTRAINT_PRIMARYKEY ||
          extended_code == SQLITE_CONSTRAINT_UNIQUE || extended_code == SQLITE_CONSTRAINT_ROWID) {
        return errc::already_exists;
      }
      return errc::failed_precondition;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return errc::permission_denied;
    case SQLITE_CANTOPEN:
      if (system_errno == ENOENT) {
        return errc::not_found;
      }
      if (system_errno == EACCES || system_errno == EPERM) {
        return errc::permission_denied;
      }
      return errc::io_error;
    case SQLITE_NOMEM:
    case SQLITE_TOOBIG:
      return errc::resource_exhausted;
    case SQLITE_INTERRUPT:
    case SQLITE_ABORT:
      return errc::aborted;
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
      return errc::invalid_argument;
    default:
      return errc::internal;
  }
}

// ---- Database

// Compiled statements between uses, by the address of their SQL text (an Sql is always a
// string literal, so one text has one address per translation unit at most; two copies of
// the same literal only mean two entries). Bounded by the literals in the program and by
// how many of one are in use at once.
struct Database::StatementCache {
  std::unordered_multimap<const char*, sqlite3_stmt*> idle;

  ~StatementCache() {
    for (const auto& [key, stmt] : idle) {
      sqlite3_finalize(stmt);
    }
  }
};

Database::Database(sqlite3* db, std::string path)
    : db_(db), path_(std::move(path)), cache_(std::make_unique<StatementCache>()) {}

std::size_t Database::cached_statements() const noexcept {
  return cache_ ? cache_->idle.size() : 0;
}

result<Database> Database::open(const std::string& path, OpenMode mode) {
  // NOMUTEX: the connection is confined to one thread at a time (see the header), so
  // SQLite's per-connection mutex would only cost time.
  int flags = SQLITE_OPEN_NOMUTEX;
  switch (mode) {
    case OpenMode::read_only:
      flags |= SQLITE_OPEN_READONLY;
      break;
    case OpenMode::read_write:
      flags |= SQLITE_OPEN_READWRITE;
      break;
    case OpenMode::read_write_create:
      flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
      break;
  }
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  // sqlite3_open_v2 hands out a connection even when it fails; own it before anything
  // else so that it is closed on every path.
  Database db(raw, path);
  if (raw == nullptr) {
    return fail(errc::resource_exhausted, "cannot open database '" + path + "': out of memory");
  }
  if (rc != SQLITE_OK) {
    return failure(raw, rc, "cannot open database '" + path + "'");
  }
  sqlite3_extended_result_codes(raw, 1);
  return db;
}

Database::Database(Database&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)),
      path_(std::move(other.path_)),
      cache_(std::move(other.cache_)) {}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    close();
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
    cache_ = std::move(other.cache_);
  }
  return *this;
}

Database::~Database() {
  close();
}

void Database::close() noexcept {
  cache_.reset();  // finalizes the idle statements before the connection goes
  if (db_ != nullptr) {
    // close_v2 defers the close until the last statement is finalized instead of failing
    // with SQLITE_BUSY; there is nothing useful to do with its result here.
    sqlite3_close_v2(db_);
    db_ = nullptr;
  }
}

result<void> Database::exec(Sql sql) {
  FEDCORE_ASSERT(db_ != nullptr, "Database::exec on a moved-from Database");
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    return failure(db_, rc, "");
  }
  return {};
}

result<Statement> Database::prepare(Sql sql) {
  FEDCORE_ASSERT(db_ != nullptr, "Database::prepare on a moved-from Database");
  if (auto idle = cache_->idle.find(sql.c_str()); idle != cache_->idle.end()) {
    Statement statement(idle->second, cache_.get(), sql.c_str());
    cache_->idle.erase(idle);
    return statement;
  }
  sqlite3_stmt* raw = nullptr;
  const char* tail = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &raw, &tail);
  Statement statement(raw, cache_.get(), sql.c_str());
  if (rc != SQLITE_OK) {
    return failure(db_, rc, std::string("cannot prepare \"") + sql.c_str() + "\"");
  }
  // Anything after the first statement would be silently ignored by SQLite.
  FEDCORE_ASSERT(raw != nullptr && (tail == nullptr || only_whitespace(tail)),
                 "Database::prepare takes exactly one SQL statement");
  return statement;
}

void Database::set_busy_timeout(std::chrono::milliseconds timeout) noexcept {
  FEDCORE_ASSERT(db_ != nullptr, "Database::set_busy_timeout on a moved-from Database");
  const auto ms = std::clamp<std::chrono::milliseconds::rep>(timeout.count(), 0, 1 << 30);
  // The budget travels in the handler's context pointer itself: a Database moves, so
  // nothing it owns has a stable address to point at.
  sqlite3_busy_handler(db_, &wait_for_lock,
                       reinterpret_cast<void*>(static_cast<std::intptr_t>(ms)));  // NOLINT
}

std::int64_t Database::last_insert_rowid() const noexcept {
  return sqlite3_last_insert_rowid(db_);
}

std::int64_t Database::changes() const noexcept {
  return sqlite3_changes64(db_);
}

bool Database::in_transaction() const noexcept {
  return sqlite3_get_autocommit(db_) == 0;
}

// ---- Statement

Statement::Statement(Statement&& other) noexcept
    : stmt_(std::exchange(other.stmt_, nullptr)),
      cache_(other.cache_),
      key_(other.key_),
      bind_rc_(std::exchange(other.bind_rc_, SQLITE_OK)),
      bind_index_(other.bind_index_) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    give_back();
    stmt_ = std::exchange(other.stmt_, nullptr);
    cache_ = other.cache_;
    key_ = other.key_;
    bind_rc_ = std::exchange(other.bind_rc_, SQLITE_OK);
    bind_index_ = other.bind_index_;
  }
  return *this;
}

Statement::~Statement() {
  give_back();
}

void Statement::give_back() noexcept {
  if (stmt_ == nullptr) {
    return;
  }
  // Both return the last step's error, which step() has already reported. The reset ends
  // any read the statement still held open; the bindings go so that no bound text or blob
  // lives on in the cache.
  if (cache_ == nullptr) {
    sqlite3_finalize(std::exchange(stmt_, nullptr));
    return;
  }
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  try {
    cache_->idle.emplace(key_, std::exchange(stmt_, nullptr));
  } catch (...) {  // out of memory for the map's node: compile it again next time
    sqlite3_finalize(std::exchange(stmt_, nullptr));
  }
}

void Statement::note_bind(int rc, int index) noexcept {
  if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) {
    bind_rc_ = rc;
    bind_index_ = index;
  }
}

Statement& Statement::bind_int64(int index, std::int64_t value) noexcept {
  note_bind(sqlite3_bind_int64(stmt_, index, value), index);
  return *this;
}

Statement& Statement::bind_double(int index, double value) noexcept {
  note_bind(sqlite3_bind_double(stmt_, index, value), index);
  return *this;
}

Statement& Statement::bind_text(int index, std::string_view value) noexcept {
  // An empty string_view may carry a null pointer, which SQLite would bind as NULL.
  const char* data = value.empty() ? "" : value.data();
  note_bind(sqlite3_bind_text64(stmt_, index, data, value.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
            index);
  return *this;
}

Statement& Statement::bind_blob(int index, std::span<const std::byte> value) noexcept {
  // A null data pointer would bind NULL rather than an empty blob.
  const int rc = value.empty() ? sqlite3_bind_zeroblob(stmt_, index, 0)
                               : sqlite3_bind_blob64(stmt_, index, value.data(), value.size(),
                                                     SQLITE_TRANSIENT);
  note_bind(rc, index);
  return *this;
}

Statement& Statement::bind_null(int index) noexcept {
  note_bind(sqlite3_bind_null(stmt_, index), index);
  return *this;
}

result<StepResult> Statement::step() {
  FEDCORE_ASSERT(stmt_ != nullptr, "Statement::step on a moved-from Statement");
  if (bind_rc_ != SQLITE_OK) {
    std::string message = "cannot bind parameter ";
    message += std::to_string(bind_index_);
    message += ": ";
    message += sqlite3_errstr(bind_rc_);
    message += " (sqlite extended code ";
    message += std::to_string(bind_rc_);
    message += ")";
    return fail(errc_from_sqlite(bind_rc_), std::move(message));
  }
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) {
    return StepResult::row;
  }
  if (rc == SQLITE_DONE) {
    return StepResult::done;
  }
  return failure(sqlite3_db_handle(stmt_), rc, "");
}

result<void> Statement::run() {
  for (;;) {
    auto stepped = step();
    if (!stepped) {
      return stepped.error();
    }
    if (*stepped == StepResult::done) {
      return {};
    }
  }
}

void Statement::reset() noexcept {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_rc_ = SQLITE_OK;
  bind_index_ = 0;
}

bool Statement::column_is_null(int column) const noexcept {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

std::int64_t Statement::column_int64(int column) const noexcept {
  return sqlite3_column_int64(stmt_, column);
}

double Statement::column_double(int column) const noexcept {
  return sqlite3_column_double(stmt_, column);
}

std::string Statement::column_text(int column) const {
  const auto* text = sqlite3_column_text(stmt_, column);
  const int size = sqlite3_column_bytes(stmt_, column);
  if (text == nullptr || size <= 0) {
    return {};
  }
  return std::string(reinterpret_cast<const char*>(text), static_cast<std::size_t>(size));
}

std::vector<std::byte> Statement::column_blob(int column) const {
  const auto* blob = static_cast<const std::byte*>(sqlite3_column_blob(stmt_, column));
  const int size = sqlite3_column_bytes(stmt_, column);
  if (blob == nullptr || size <= 0) {
    return {};
  }
  return std::vector<std::byte>(blob, blob + size);
}

// ---- Transaction

result<Transaction> Transaction::begin(Database& db, TransactionMode mode) {
  FEDCORE_ASSERT(db.db_ != nullptr, "Transaction::begin on a moved-from Database");
  if (db.in_transaction()) {
    return fail(errc::internal, "a transaction is already open on '" + db.path() + "'");
  }
  const char* sql = "BEGIN IMMEDIATE";
  switch (mode) {
    case TransactionMode::deferred:
      sql = "BEGIN DEFERRED";
      break;
    case TransactionMode::immediate:
      sql = "BEGIN IMMEDIATE";
      break;
    case TransactionMode::exclusive:
      sql = "BEGIN EXCLUSIVE";
      break;
  }
  const int rc = sqlite3_exec(db.db_, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    return failure(db.db_, rc, "cannot begin a transaction on '" + db.path() + "'");
  }
  return Transaction(db.db_);
}

Transaction::Transaction(Transaction&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}

Transaction::~Transaction() {
  // SQLite may already have rolled back on its own (after SQLITE_FULL, for instance);
  // a second ROLLBACK would only fail.
  if (db_ != nullptr && sqlite3_get_autocommit(db_) == 0) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

result<void> Transaction::commit() {
  FEDCORE_ASSERT(db_ != nullptr, "Transaction::commit: already committed or moved from");
  sqlite3* db = std::exchange(db_, nullptr);
  const int rc = sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    auto e = failure(db, rc, "cannot commit");
    // A COMMIT that failed with SQLITE_BUSY leaves the transaction open; close it now so
    // that the promise "nothing of it is visible" holds without waiting for the destructor.
    if (sqlite3_get_autocommit(db) == 0) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    }
    return e;
  }
  return {};
}

}  // namespace fedcore::store
