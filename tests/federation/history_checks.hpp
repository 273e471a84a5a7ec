// What a crash of the server must never break, checked on a history file after the fact
// (crash_resume_test, kill_loop_test).
#pragma once

#include <algorithm>
#include <fstream>
#include <iterator>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/store/history_store.hpp"
#include "shared/model/param_io.hpp"
#include "shared/util/checksum.hpp"

namespace fedcore::testing {

struct IntactHistory {
  std::int64_t last_round = -1;  // the run's; -1 if it could not be read
  store::RunState state = store::RunState::failed;
  std::vector<store::CheckpointRecord> checkpoints;  // one per committed round, in order
};

// Opens `db` read-only and checks run `run_id`, reporting every breach as a test failure:
//   - the committed rounds are exactly 1..last_round, each once, in order (failed
//     attempts may sit between them);
//   - each committed round names a checkpoint row of its own round, and there is no
//     other checkpoint row;
//   - each checkpoint file retention has not removed exists, has the recorded size, the
//     CRC-32 of its content (every byte before the 4-byte trailer, docs/schema.md) equals
//     the crc32 column, and it decodes (a removed one's file may still be there, until the
//     next start's sweep, if the kill came between its round's commit and its deletion);
//   - the newest checkpoint is never a removed one;
//   - every checkpoint path the store references is one of those (nothing else, nothing
//     half-written, is referenced);
//   - PRAGMA integrity_check reports ok.
inline IntactHistory expect_intact_history(const std::string& db, std::int64_t run_id = 1) {
  IntactHistory out;
  auto history = store::HistoryStore::open_read_only(db);
  if (!history) {
    ADD_FAILURE() << "cannot open " << db << ": " << history.error().to_string();
    return out;
  }
  auto run = history->get_run(run_id);
  auto rounds = history->list_rounds(run_id);
  auto checkpoints = history->list_checkpoints(run_id);
  auto referenced = history->referenced_checkpoint_paths();
  auto integrity = history->integrity_check();
  if (!run || !rounds || !checkpoints || !referenced || !integrity) {
    ADD_FAILURE() << "cannot read run " << run_id << " of " << db;
    return out;
  }
  out.last_round = run->last_round;
  out.state = run->state;
  EXPECT_TRUE(*integrity) << "PRAGMA integrity_check of " << db;

  std::vector<std::int64_t> committed;
  std::vector<std::int64_t> named;  // the checkpoint id each committed round names
  for (const auto& r : *rounds) {
    if (r.state == store::RoundState::committed) {
      committed.push_back(r.round);
      named.push_back(r.checkpoint_id.value_or(-1));
    }
  }
  std::vector<std::int64_t> expected(
      static_cast<std::size_t>(std::max<std::int64_t>(0, out.last_round)));
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(committed, expected) << "every round up to " << out.last_round
                                 << " committed exactly once, in order";

  out.checkpoints = *checkpoints;
  std::sort(out.checkpoints.begin(), out.checkpoints.end(),
            [](const auto& a, const auto& b) { return a.round < b.round; });
  EXPECT_EQ(out.checkpoints.size(), committed.size()) << "one checkpoint per committed round";
  std::set<std::string> paths;
  for (std::size_t i = 0; i < out.checkpoints.size(); ++i) {
    const auto& c = out.checkpoints[i];
    paths.insert(c.ref.path);
    if (i < committed.size()) {
      EXPECT_EQ(c.round, committed[i]) << c.ref.path;
      EXPECT_EQ(c.id, named[i]) << "round " << committed[i] << " names another checkpoint";
    }
    if (c.removed_ms) {
      EXPECT_LT(i + 1, out.checkpoints.size()) << "retention removed the newest checkpoint";
      continue;
    }
    std::ifstream in(c.ref.path, std::ios::binary);
    if (!in) {
      ADD_FAILURE() << "round " << c.round << ": checkpoint " << c.ref.path << " is missing";
      continue;
    }
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(static_cast<std::int64_t>(bytes.size()), c.ref.size_bytes) << c.ref.path;
    if (bytes.size() <= 4) {
      ADD_FAILURE() << c.ref.path << " is too short to be a checkpoint";
      continue;
    }
    EXPECT_EQ(crc32(std::as_bytes(std::span(bytes)).first(bytes.size() - 4)), c.ref.crc32)
        << c.ref.path;
    EXPECT_TRUE(model::load_params(c.ref.path)) << c.ref.path;
  }
  for (const auto& path : *referenced) {
    EXPECT_TRUE(paths.count(path) == 1)
        << "the store references " << path << ", which is no committed round's checkpoint";
  }
  return out;
}

}  // namespace fedcore::testing
