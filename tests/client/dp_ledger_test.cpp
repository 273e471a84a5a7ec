// The site's own record-level DP accountant: it refuses a round that would take the site
// past the run's stated budget, whatever the server says it has spent.
#include "client/dp_ledger.hpp"

#include <gtest/gtest.h>

#include "shared/model/dp_sgd.hpp"
#include "shared/privacy/rdp_accountant.hpp"

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

}  // namespace
}  // namespace fedcore::client
