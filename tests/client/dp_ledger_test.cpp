// The site's own record-level DP accountant: it refuses a round that would take the site
// past the run's stated budget, whatever the server says it has spent.
#include "client/dp_ledger.hpp"

#include <fstream>

#include <gtest/gtest.h>

#include "shared/model/dp_sgd.hpp"
#include "shared/privacy/rdp_accountant.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::client {
namespace {

protocol::TrainRequest record_request(std::int64_t run, double epsilon, double z) {
  protocol::TrainRequest r;
  r.run_id = run;
  r.round = 1;
  r.settings.epochs = 1;
  r.settings.batch_size = 50;
  r.privacy.dp = protocol::DpMode::record;
  r.privacy.epsilon = epsilon;
  r.privacy.delta = 1e-5;
  r.privacy.clip_norm = 1;
  r.privacy.noise_multiplier = z;
  return r;
}

TEST(RecordDpLedger, RefusesTheRoundThatWouldPassTheBudget) {
  // 1000 records, batch 50: q = 0.05, 20 steps a round. Budget: what 3 rounds cost at z=1.
  auto accountant = privacy::RdpAccountant::create().value();
  ASSERT_TRUE(accountant.compose_poisson_gaussian(0.05, 1.0, 60));
  const double three_rounds = accountant.epsilon(1e-5)->epsilon;
  RecordDpLedger ledger(1000);
  auto request = record_request(7, three_rounds * 1.000001, 1.0);
  for (int round = 1; round <= 3; ++round) {
    EXPECT_EQ(ledger.check(request), std::nullopt) << "round " << round;
    ASSERT_TRUE(ledger.record(7, {0.05, 1.0, 20}, 1e-5));
  }
  EXPECT_NEAR(*ledger.spent(7, 1e-5), three_rounds, 1e-9);
  auto refused = ledger.check(request);
  ASSERT_TRUE(refused.has_value());
  EXPECT_NE(refused->find("above the run's budget"), std::string::npos) << *refused;
  // Another run has its own ledger.
  EXPECT_EQ(ledger.check(record_request(8, three_rounds, 1.0)), std::nullopt);
}

TEST(RecordDpLedger, AServerThatUnderstatesTheNoiseIsRefusedAtOnce) {
  RecordDpLedger ledger(1000);
  // With z = 0.3 one round of 20 steps at q = 0.05 already costs far more than epsilon 1.
  auto refused = ledger.check(record_request(1, 1.0, 0.3));
  ASSERT_TRUE(refused.has_value());
  // Requests without record-level DP are not the ledger's business.
  auto plain = record_request(1, 1.0, 0.3);
  plain.privacy.dp = protocol::DpMode::none;
  EXPECT_EQ(ledger.check(plain), std::nullopt);
}

TEST(RecordDpLedger, PredictsWhatDpSgdDoes) {
  RecordDpLedger ledger(1000);
  auto request = record_request(1, 100, 1.1);
  request.settings.epochs = 2;
  auto predicted = ledger.epsilon_after(request).value();
  // DP-SGD's own step count for 1000 records at batch 50, two epochs.
  const auto steps = 2 * model::dp_sgd_steps_per_epoch(1000, 50);
  auto recorded = ledger.record(1, {0.05, 1.1, steps}, 1e-5).value();
  EXPECT_DOUBLE_EQ(predicted, recorded);
}

TEST(RecordDpLedger, AFileKeepsTheSpendAcrossARestartAndADamagedFileStopsTheStart) {
  fedcore::testing::TempDir dir;
  const auto path = dir.path("dp-ledger.json");
  auto accountant = privacy::RdpAccountant::create().value();
  ASSERT_TRUE(accountant.compose_poisson_gaussian(0.05, 1.0, 60));
  const double three_rounds = accountant.epsilon(1e-5)->epsilon;
  auto request = record_request(7, three_rounds * 1.000001, 1.0);
  {
    RecordDpLedger ledger(1000);
    ASSERT_TRUE(ledger.persist_to(path));  // no file yet: an empty start
    ASSERT_TRUE(ledger.record(7, {0.05, 1.0, 20}, 1e-5));
    ASSERT_TRUE(ledger.record(7, {0.05, 1.0, 20}, 1e-5));
    ASSERT_TRUE(ledger.record(3, {0.1, 2.0, 10}, 1e-5));
  }
  // The restarted daemon's ledger: the third round fits, the fourth does not — exactly as
  // if it had never stopped.
  RecordDpLedger restarted(1000);
  ASSERT_TRUE(restarted.persist_to(path));
  EXPECT_NEAR(*restarted.spent(7, 1e-5), *RecordDpLedger(1000).record(7, {0.05, 1.0, 40}, 1e-5),
              1e-12);
  EXPECT_EQ(restarted.check(request), std::nullopt);
  ASSERT_TRUE(restarted.record(7, {0.05, 1.0, 20}, 1e-5));
  ASSERT_TRUE(restarted.check(request).has_value());
  RecordDpLedger again(1000);
  ASSERT_TRUE(again.persist_to(path));
  EXPECT_NEAR(*again.spent(7, 1e-5), three_rounds, 1e-9);
  EXPECT_GT(*again.spent(3, 1e-5), 0);  // the other run is kept too

  // Something else, and a damaged ledger: refused naming the file, and left as they are.
  const auto foreign = dir.path("other.json");
  std::ofstream(foreign) << R"({"hello": 1})";
  RecordDpLedger refused(1000);
  auto opened = refused.persist_to(foreign);
  ASSERT_FALSE(opened);
  EXPECT_NE(opened.error().message.find("not a Fedcore DP ledger"), std::string::npos);
  std::ofstream(path) << R"({"fedcore_dp_ledger": 1, "runs": [{"run": 7, "rounds": [{"q": 2}]}]})";
  opened = refused.persist_to(path);
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().code, errc::data_loss);
  EXPECT_NE(opened.error().message.find(path), std::string::npos) << opened.error().message;
}

TEST(RecordDpLedger, AnUnwritableLedgerFailsTheRecord) {
  fedcore::testing::TempDir dir;
  RecordDpLedger ledger(1000);
  ASSERT_TRUE(ledger.persist_to(dir.path("missing-folder/dp-ledger.json")));
  auto recorded = ledger.record(1, {0.05, 1.0, 20}, 1e-5);
  ASSERT_FALSE(recorded);
  EXPECT_EQ(recorded.error().code, errc::io_error);
  EXPECT_NE(recorded.error().message.find("site DP ledger"), std::string::npos);
}

}  // namespace
}  // namespace fedcore::client
