// The history database's schema and its migrations (the tables are documented in
// docs/schema.md).
//
// The schema version is SQLite's `PRAGMA user_version`: 0 for an empty database, N after
// migration N. Migrations are applied in order, all pending ones in a single
// BEGIN IMMEDIATE transaction, so a database is always at exactly one known version even
// if the process dies mid-migration. Each migration's SQL sets user_version itself.
//
// To change the schema, append a migration (never edit a released one) and bump
// kSchemaVersion.
//
// Thread safety: the functions use only the Database they are given.
#pragma once

#include <cstdint>
#include <span>

#include "server/store/sqlite.hpp"
#include "shared/util/error.hpp"

namespace fedcore::store {

struct Migration {
  std::int64_t version;  // user_version after this migration
  Sql sql;
};

// The newest schema version this build knows.
inline constexpr std::int64_t kSchemaVersion = 8;

// Every migration, ordered by version: 1, 2, ..., kSchemaVersion.
std::span<const Migration> migrations() noexcept;

// The database's PRAGMA user_version. Errors: as Database.
result<std::int64_t> schema_version(Database& db);

// Brings a writable database to kSchemaVersion. Errors: errc::failed_precondition if the
// database's version is newer than kSchemaVersion (written by a newer Fedcore; it is left
// untouched); errc::unavailable if another writer holds the lock past the busy timeout;
// otherwise as Database, with nothing of the failed migration applied.
result<void> migrate(Database& db);

// For connections that cannot migrate (read-only): succeeds only if the database is at
// exactly kSchemaVersion. Errors: errc::failed_precondition naming the version found
// (0 = no Fedcore schema, older = not yet migrated by a writer, newer = newer Fedcore).
result<void> require_current_schema(Database& db);

}  // namespace fedcore::store
