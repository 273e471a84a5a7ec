// Shared values for the store tests: records with every field set to something
// distinctive, and a side connection that counts rows behind HistoryStore's back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/store/history_store.hpp"
#include "server/store/schema.hpp"
#include "server/store/sqlite.hpp"

namespace fedcore::store::testing {

inline ClientRecord make_client(const std::string& id, std::int64_t now_ms = 1000) {
  ClientRecord c;
  c.id = id;
  c.first_seen_ms = now_ms;
  c.last_seen_ms = now_ms;
  c.samples = 600;
  c.input_shape_json = "[28,28,1]";
  c.capabilities_json = R"({"threads":4})";
  c.online = true;
  return c;
}

// A round whose fields all differ from their defaults, so a lost column shows.
inline RoundRecord make_round(std::int64_t run_id, std::int64_t round) {
  RoundRecord r;
  r.run_id = run_id;
  r.round = round;
  r.started_ms = 10'000 + round * 100;
  r.finished_ms = 10'050 + round * 100;
  r.selected = 3;
  r.accepted = 2;
  r.rejected = 1;
  r.timed_out = 0;
  r.dropped = 0;
  r.train_loss = 0.5 / static_cast<double>(round);
  r.train_accuracy = 0.8;
  r.eval_loss = 0.45;
  r.eval_accuracy = 0.83;
  r.fed_eval_loss = std::nullopt;  // one absent optional on purpose
  r.fed_eval_accuracy = 0.81;
  r.bytes_up = 123'456;
  r.bytes_down = 654'321;
  return r;
}

inline ClientResult make_result(const std::string& client_id, std::int64_t seed,
                                ResultStatus status = ResultStatus::ok) {
  ClientResult r;
  r.client_id = client_id;
  r.status = status;
  r.reason = status == ResultStatus::ok ? "" : "update norm 1e9 above clip";
  r.samples = 100 + seed;
  r.loss = 0.25 + 0.01 * static_cast<double>(seed);
  r.accuracy = 0.75 + 0.001 * static_cast<double>(seed);
  r.duration_s = 1.5 + static_cast<double>(seed);
  r.bytes_up = 1000 + seed;
  r.bytes_down = 2000 + seed;
  if (seed % 2 == 0) {
    r.eval_loss = 0.3;
    r.eval_accuracy = 0.7;
    r.eval_samples = 50;
  }
  return r;
}

inline CheckpointRef make_checkpoint(const std::string& path) {
  return CheckpointRef{path, 4096, 0xDEADBEEFu, "0123456789abcdef"};
}

// A new database file at `path` as a version-`version` Fedcore left it (migrations
// 1..version), for the migration tests to fill with that version's history.
inline Database database_at_version(const std::string& path, std::int64_t version) {
  auto db = Database::open(path, OpenMode::read_write_create);
  EXPECT_TRUE(db) << db.error().to_string();
  for (const auto& m : migrations()) {
    if (m.version <= version) {
      EXPECT_TRUE(db->exec(m.sql)) << m.version;
    }
  }
  EXPECT_EQ(*schema_version(*db), version);
  return std::move(*db);
}

// A separate connection to a store file, for looking at raw rows.
class SideConnection {
 public:
  explicit SideConnection(const std::string& path)
      : db_(std::move(Database::open(path, OpenMode::read_write).value())) {}

  std::int64_t count(Sql sql) {
    auto s = db_.prepare(sql);
    EXPECT_TRUE(s) << s.error().to_string();
    if (!s) {
      return -1;
    }
    auto stepped = s->step();
    EXPECT_TRUE(stepped && *stepped == StepResult::row);
    return s->column_int64(0);
  }
  std::int64_t rounds() { return count("SELECT count(*) FROM rounds"); }
  std::int64_t results() { return count("SELECT count(*) FROM client_results"); }
  std::int64_t checkpoints() { return count("SELECT count(*) FROM checkpoints"); }
  std::int64_t tables() { return count("SELECT count(*) FROM sqlite_schema WHERE type = 'table'"); }

  Database& db() { return db_; }

 private:
  Database db_;
};

}  // namespace fedcore::store::testing
