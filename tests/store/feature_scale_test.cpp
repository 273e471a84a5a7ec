// HistoryStore's feature scales (run_feature_scales, migration 3): exact round trips, one
// scale per run, refused input, and a version-2 history migrated in place.
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
using testing::SideConnection;

FeatureScaleRecord sample_scale(std::int64_t run_id) {
  // Values whose shortest decimal forms are long: the text must read back bit for bit.
  return {run_id,
          {14.127291739894552, -0.1, 1.0 / 3.0},
          {3.5240488105120295, 1e-7, 654.5},
          3,
          455,
          1700000000123};
}

TEST(HistoryFeatureScales, SavedScaleReadsBackExactlyAndOnlyOnce) {
  auto store = HistoryStore::open(":memory:");
  ASSERT_TRUE(store);
  auto run = store->create_run("bc", "{}", 5, 1);
  ASSERT_TRUE(run);
  auto none = store->feature_scale(run->id);
  ASSERT_TRUE(none) << none.error().to_string();
  EXPECT_FALSE(none->has_value());

  ASSERT_TRUE(store->save_feature_scale(sample_scale(run->id)));
  auto read = store->feature_scale(run->id);
  ASSERT_TRUE(read) << read.error().to_string();
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ(**read, sample_scale(run->id));

  auto again = sample_scale(run->id);
  again.mean[0] = 0;
  auto twice = store->save_feature_scale(again);
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, errc::already_exists);
  EXPECT_EQ(**store->feature_scale(run->id), sample_scale(run->id)) << "the first scale stays";
}

TEST(HistoryFeatureScales, UnknownRunsAreNotFound) {
  auto store = HistoryStore::open(":memory:");
  ASSERT_TRUE(store);
  auto saved = store->save_feature_scale(sample_scale(42));
  ASSERT_FALSE(saved);
  EXPECT_EQ(saved.error().code, errc::not_found);
  auto read = store->feature_scale(42);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code, errc::not_found);
}

TEST(HistoryFeatureScales, MalformedScalesAreInvalidArguments) {
  auto store = HistoryStore::open(":memory:");
  ASSERT_TRUE(store);
  auto run = store->create_run("bc", "{}", 5, 1);
  ASSERT_TRUE(run);
  const auto nan = std::numeric_limits<double>::quiet_NaN();
  const auto inf = std::numeric_limits<double>::infinity();
  std::vector<FeatureScaleRecord> bad(8, sample_scale(run->id));
  bad[0].mean.clear();
  bad[0].stddev.clear();
  bad[1].stddev.pop_back();
  bad[2].stddev[1] = 0;
  bad[3].stddev[1] = -1;
  bad[4].mean[2] = nan;
  bad[5].stddev[0] = inf;
  bad[6].sites = 0;
  bad[7].samples = -1;
  for (std::size_t i = 0; i < bad.size(); ++i) {
    auto saved = store->save_feature_scale(bad[i]);
    ASSERT_FALSE(saved) << i;
    EXPECT_EQ(saved.error().code, errc::invalid_argument) << i << ": " << saved.error().message;
  }
  EXPECT_FALSE(store->feature_scale(run->id)->has_value());
}

// A history written by a build of schema version 2 gains the table and keeps its runs.
TEST(HistoryFeatureScales, VersionTwoHistoryIsMigrated) {
  TempDir dir;
  const auto path = dir.path("history.db");
  {
    auto db = testing::database_at_version(path, 2);
    ASSERT_TRUE(
        db.exec("INSERT INTO runs (name, config_json, state, rounds_total, last_round, "
                "created_ms, updated_ms) VALUES ('old', '{}', 'paused', 5, 2, 1, 1)"));
    ASSERT_EQ(*schema_version(db), 2);
  }
  auto store = HistoryStore::open(path);
  ASSERT_TRUE(store) << store.error().to_string();
  auto run = store->get_run(1);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->last_round, 2);
  EXPECT_FALSE(store->feature_scale(1)->has_value());
  ASSERT_TRUE(store->save_feature_scale(sample_scale(1)));
  SideConnection side(path);
  EXPECT_EQ(*schema_version(side.db()), kSchemaVersion);  // and on to the newest
  EXPECT_EQ(side.count("SELECT count(*) FROM run_feature_scales"), 1);
}

}  // namespace
}  // namespace fedcore::store
