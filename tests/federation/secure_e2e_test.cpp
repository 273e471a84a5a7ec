// Secure aggregation over real mutual TLS: four hospitals train breast-cancer logistic
// regression with SecAgg+ (keys signed with their TLS keys, checked against the CA), and
// the result matches the same run in the clear to within the quantization error.
#include <gtest/gtest.h>

#include "shared/data/csv.hpp"
#include "shared/data/normalize.hpp"
#include "shared/data/partition.hpp"
#include "shared/data/split.hpp"
#include "shared/model/param_io.hpp"
#include "shared/util/source_tree.hpp"
#include "tests/federation/federation_fixture.hpp"

namespace fedcore {
namespace {

using testing::Federation;
using testing::TempDir;

constexpr int kHospitals = 4;
constexpr int kRounds = 3;

struct RunOutcome {
  std::vector<float> params;
  double eval_accuracy = 0;
  std::vector<store::RoundRecord> rounds;
  std::vector<std::vector<store::ClientResult>> results;
};

// The shards are written once; each run gets its own federation (PKI, server, store).
RunOutcome run_federation(const TempDir& data_dir, const std::string& privacy,
                          bool federated_evaluation = true) {
  TempDir dir;
  Federation federation(dir);
  for (int i = 1; i <= kHospitals; ++i) {
    federation.add_client_certificate("hospital-" + std::to_string(i));
  }
  federation.start_server();
  for (int i = 1; i <= kHospitals; ++i) {
    client::DataSource source;
    source.format = "csv";
    source.path = data_dir.path("hospital-" + std::to_string(i) + ".csv");
    source.label_column = "benign";
    source.test_fraction = 0.2;
    federation.start_client("hospital-" + std::to_string(i), source);
  }
  auto config = federation::parse_run_config(
      R"({"name":"bc","model":{"type":"logreg"},"rounds":3,"clients_per_round":4,
      "min_clients":4,"local_epochs":2,"batch_size":16,"optimizer":{"kind":"sgd","lr":0.1},
      "round_timeout_s":60,"seed":1,"wait_for_clients_s":60,"federated_evaluation":)" +
      std::string(federated_evaluation ? "true" : "false") + R"(,"server_test_set":")" +
      data_dir.path("held-out.csv") + R"(","label_column":"benign")" + privacy + "}");
  EXPECT_TRUE(config) << config.error().to_string();
  // The shards are standardised already, and both runs must see the same features: a
  // secure run would scale with each site's own statistics, a plain one with the
  // federated estimate (server/federation/feature_scaling.hpp).
  config->feature_scaling = protocol::ScalingMode::none;
  auto run = federation.call([&](federation::FederationServer& s) { return s.start_run(*config); });
  EXPECT_TRUE(run) << run.error().to_string();
  RunOutcome out;
  if (!run) {
    return out;
  }
  EXPECT_TRUE(federation.wait_until([&] { return federation.ended().has_value(); }))
      << "run did not end in time";
  EXPECT_EQ(federation.ended(), store::RunState::finished);
  federation.stop();
  auto history = federation.open_store();
  auto rounds = history.list_rounds(*run);
  EXPECT_TRUE(rounds);
  out.rounds = *rounds;
  for (const auto& r : out.rounds) {
    out.results.push_back(*history.list_client_results(*run, r.round));
  }
  if (!out.rounds.empty() && out.rounds.back().eval_accuracy) {
    out.eval_accuracy = *out.rounds.back().eval_accuracy;
  }
  auto checkpoint = history.latest_checkpoint(*run);
  EXPECT_TRUE(checkpoint && *checkpoint);
  auto bundle = model::load_params((*checkpoint)->ref.path);
  EXPECT_TRUE(bundle);
  out.params = bundle->params;
  return out;
}

void write_shards(const TempDir& data_dir) {
  auto table = data::load_csv(fedcore::source_path("data/breast_cancer_wisconsin.csv"),
                              {.label_column = "benign"});
  ASSERT_TRUE(table) << table.error().to_string();
  auto split = data::stratified_split(*table, 0.25, 7);
  const auto standardizer = data::Standardizer::fit(split.train);
  standardizer.apply(split.train);
  standardizer.apply(split.test);
  const auto shards = data::partition_iid(split.train.labels, kHospitals, 11);
  for (int i = 0; i < kHospitals; ++i) {
    testing::write_csv(split.train.subset(shards[static_cast<std::size_t>(i)]),
                       data_dir.path("hospital-" + std::to_string(i + 1) + ".csv"), "benign");
  }
  testing::write_csv(split.test, data_dir.path("held-out.csv"), "benign");
}

TEST(SecureFederation, FourHospitalsWithSecAggPlusMatchPlainFedAvg) {
  TempDir data_dir;
  write_shards(data_dir);
  const auto plain = run_federation(data_dir, "");
  const auto secure = run_federation(
      data_dir, R"(,"privacy":{"secure_aggregation":{"stage_timeout_s":30,"bind_keys":true}})");
  ASSERT_EQ(secure.rounds.size(), static_cast<std::size_t>(kRounds));
  ASSERT_EQ(plain.params.size(), secure.params.size());
  // Same data, seeds and order: the secure run differs from the plain one only by the
  // fixed-point encoding, about 4 * 2^-18 per round and coordinate.
  for (std::size_t i = 0; i < plain.params.size(); ++i) {
    EXPECT_NEAR(secure.params[i], plain.params[i], 1e-3) << "parameter " << i;
  }
  EXPECT_NEAR(secure.eval_accuracy, plain.eval_accuracy, 0.011);
  EXPECT_GT(secure.eval_accuracy, 0.9);
  // Federated evaluation comes out of the masked sum: the same means as the plain run's,
  // which averages the sites' own answers to EVALUATE (weights min(test samples, cap) /
  // cap there, test samples here: equal ratios). Round r + 1's masked sum evaluates round
  // r's aggregate and is recorded with round r; the final model has no later round, so
  // without per-client evaluation it stays unevaluated (docs/privacy.md).
  for (std::size_t r = 0; r < secure.rounds.size(); ++r) {
    ASSERT_TRUE(plain.rounds[r].fed_eval_accuracy.has_value()) << "round " << r + 1;
    if (r + 1 == secure.rounds.size()) {
      EXPECT_FALSE(secure.rounds[r].fed_eval_accuracy.has_value());
      continue;
    }
    ASSERT_TRUE(secure.rounds[r].fed_eval_accuracy.has_value()) << "round " << r + 1;
    EXPECT_NEAR(*secure.rounds[r].fed_eval_accuracy, *plain.rounds[r].fed_eval_accuracy, 2e-3);
    EXPECT_NEAR(*secure.rounds[r].fed_eval_loss, *plain.rounds[r].fed_eval_loss, 2e-3);
  }
  for (std::size_t r = 0; r < secure.rounds.size(); ++r) {
    EXPECT_EQ(secure.rounds[r].accepted, kHospitals);
    // Nothing per client that would leak an update: no loss, no sample count.
    EXPECT_EQ(secure.rounds[r].train_loss, 0.0);
    for (const auto& result : secure.results[r]) {
      EXPECT_EQ(result.status, store::ResultStatus::ok) << result.reason;
      EXPECT_EQ(result.samples, 0);
      EXPECT_EQ(result.loss, 0.0);
      EXPECT_GT(result.bytes_up, 0);
    }
  }
}

// Distributed DP with adaptive clipping over real TLS: the daemons clip, noise their
// updates and their unclipped bits with their shares, and the server moves the clip from
// the masked bit sum alone. Every update of this model is far below the starting clip of
// 10 (logistic regression, 2 epochs at lr 0.1), so b is about 1 and each round's clip is
// C exp(-0.5 (1 - 0.5)) = 0.78 C, give or take the bit noise (sd 0.05 / 4 sites).
TEST(SecureFederation, DistributedDpMovesTheAdaptiveClipFromTheMaskedBits) {
  TempDir data_dir;
  write_shards(data_dir);
  const auto run =
      run_federation(data_dir,
                     R"(,"privacy":{"secure_aggregation":{"stage_timeout_s":30,)"
                     R"("bind_keys":true},"dp":{"mode":"client_distributed","clip_norm":10,)"
                     R"("noise_multiplier":0.09,"delta":1e-5,"epsilon":5000,"adaptive_clip":)"
                     R"({"target_quantile":0.5,"learning_rate":0.5,"count_stddev":0.05}}})",
                     false);
  ASSERT_EQ(run.rounds.size(), static_cast<std::size_t>(kRounds));
  double clip = 10;
  for (const auto& r : run.rounds) {
    ASSERT_TRUE(r.dp_charge && r.dp_charge->clip_norm) << "round " << r.round;
    EXPECT_DOUBLE_EQ(r.dp_charge->noise_multiplier, 0.09);
    const double ratio = *r.dp_charge->clip_norm / clip;
    EXPECT_GT(ratio, 0.76) << "round " << r.round;
    EXPECT_LT(ratio, 0.80) << "round " << r.round;
    clip = *r.dp_charge->clip_norm;
    EXPECT_TRUE(r.secure_aggregation);
    EXPECT_EQ(r.accepted, kHospitals);
  }
}

}  // namespace
}  // namespace fedcore
