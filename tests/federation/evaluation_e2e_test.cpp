// Federated evaluation end to end: one server and four hospital daemons over mutual TLS on
// loopback. After each round's aggregation the participants evaluate the NEW global model
// on their local test splits; the stored values are exactly those of evaluating round r's
// checkpoint on the same split here, the round's mean is their sample-weighted mean, a
// site whose policy forbids evaluation is recorded as refused, and every daemon's audit log
// says what left.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "client/audit_log.hpp"
#include "client/data_source.hpp"
#include "client/local_evaluator.hpp"
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

client::DataSource source_of(const TempDir& dir, int hospital) {
  client::DataSource source;
  source.format = "csv";
  source.path = dir.path("hospital-" + std::to_string(hospital) + ".csv");
  source.label_column = "benign";
  source.test_fraction = 0.2;
  return source;
}

std::vector<nlohmann::json> audit_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

TEST(FederatedEvaluation, EachRoundsNewModelIsEvaluatedByItsParticipantsOnTheirTestSplits) {
  TempDir dir;
  auto table = data::load_csv(fedcore::source_path("data/breast_cancer_wisconsin.csv"),
                              {.label_column = "benign"});
  ASSERT_TRUE(table) << table.error().to_string();
  auto split = data::stratified_split(*table, 0.25, 7);
  const auto standardizer = data::Standardizer::fit(split.train);
  standardizer.apply(split.train);
  const auto shards = data::partition_iid(split.train.labels, kHospitals, 11);
  for (int i = 0; i < kHospitals; ++i) {
    testing::write_csv(split.train.subset(shards[static_cast<std::size_t>(i)]),
                       dir.path("hospital-" + std::to_string(i + 1) + ".csv"), "benign");
  }

  Federation federation(dir);
  for (int i = 1; i <= kHospitals; ++i) {
    federation.add_client_certificate("hospital-" + std::to_string(i));
  }
  federation.start_server();
  for (int i = 1; i <= kHospitals; ++i) {
    client::SitePolicy policy;
    policy.allow_evaluation = i != kHospitals;  // the last hospital trains but never evaluates
    federation.start_client("hospital-" + std::to_string(i), source_of(dir, i), policy,
                            dir.path("audit-" + std::to_string(i) + ".jsonl"));
  }
  auto run = federation.start_run(
      R"({"name":"eval","model":{"type":"logreg"},"rounds":3,"clients_per_round":4,
      "min_clients":4,"local_epochs":2,"batch_size":16,"optimizer":{"kind":"sgd","lr":0.1},
      "round_timeout_s":60,"seed":1,"wait_for_clients_s":60,"evaluation_timeout_s":60,
      "feature_scaling":"none"})");
  ASSERT_TRUE(run) << run.error().to_string();
  ASSERT_TRUE(federation.wait_until([&] { return federation.ended().has_value(); }))
      << "run did not end in time";
  EXPECT_EQ(*federation.ended(), store::RunState::finished);
  federation.stop();

  auto history = federation.open_store();
  auto rounds = history.list_rounds(*run);
  auto checkpoints = history.list_checkpoints(*run);
  ASSERT_TRUE(rounds && checkpoints);
  ASSERT_EQ(rounds->size(), static_cast<std::size_t>(kRounds));
  ASSERT_EQ(checkpoints->size(), static_cast<std::size_t>(kRounds));
  std::vector<data::TrainTest> local;
  for (int i = 1; i <= kHospitals; ++i) {
    auto loaded = client::load_local_data(source_of(dir, i));
    ASSERT_TRUE(loaded) << loaded.error().to_string();
    local.push_back(std::move(*loaded));
  }
  for (int r = 1; r <= kRounds; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    const auto& round = (*rounds)[static_cast<std::size_t>(r - 1)];
    const auto& checkpoint = (*checkpoints)[static_cast<std::size_t>(r - 1)];
    ASSERT_EQ(checkpoint.round, r);
    auto aggregate = model::load_params(checkpoint.ref.path);
    ASSERT_TRUE(aggregate) << aggregate.error().to_string();
    auto rows = history.list_evaluations(*run, r);
    ASSERT_TRUE(rows) << rows.error().to_string();
    ASSERT_EQ(rows->size(), static_cast<std::size_t>(kHospitals));
    // Round r's aggregate evaluated here, on the same split, with the site's own code.
    protocol::EvaluateRequest request;
    request.model_spec = {{"type", "logreg"}};
    request.layout_fingerprint = checkpoint.ref.layout_fingerprint;
    double weight = 0, loss = 0, accuracy = 0;
    for (int i = 1; i <= kHospitals; ++i) {
      const auto& row = (*rows)[static_cast<std::size_t>(i - 1)];
      ASSERT_EQ(row.client_id, "hospital-" + std::to_string(i));
      if (i == kHospitals) {
        EXPECT_EQ(row.status, store::EvaluationStatus::refused);
        EXPECT_EQ(row.message.rfind("site policy: ", 0), 0u) << row.message;
        continue;
      }
      ASSERT_EQ(row.status, store::EvaluationStatus::ok) << row.message;
      auto expected = client::evaluate_locally(request, aggregate->params,
                                               local[static_cast<std::size_t>(i - 1)], 1);
      ASSERT_TRUE(expected) << expected.error().to_string();
      EXPECT_EQ(row.samples, static_cast<std::int64_t>(expected->samples));
      EXPECT_GT(row.samples, 10);
      EXPECT_NEAR(*row.loss, expected->loss, 1e-9);
      EXPECT_NEAR(*row.accuracy, expected->accuracy, 1e-9);
      weight += double(row.samples);
      loss += double(row.samples) * *row.loss;
      accuracy += double(row.samples) * *row.accuracy;
    }
    ASSERT_TRUE(round.fed_eval_accuracy && round.fed_eval_loss);
    EXPECT_NEAR(*round.fed_eval_accuracy, accuracy / weight, 1e-12);
    EXPECT_NEAR(*round.fed_eval_loss, loss / weight, 1e-12);
  }
  // Learning shows in the federated evaluation itself.
  EXPECT_GT(*rounds->back().fed_eval_accuracy, 0.8);

  // What left each site is in its audit log: every round's request and answer.
  for (int i = 1; i <= kHospitals; ++i) {
    const auto path = dir.path("audit-" + std::to_string(i) + ".jsonl");
    ASSERT_TRUE(client::verify_audit_log(path));
    int requested = 0, sent = 0, refused = 0, finals = 0;
    for (const auto& line : audit_lines(path)) {
      const auto event = line["event"].get<std::string>();
      requested += event == "evaluation_requested";
      refused += event == "evaluation_refused";
      if (event == "evaluation_sent") {
        ++sent;
        EXPECT_EQ(line["for"], "evaluate");
        finals += line["final"].get<bool>();
      }
    }
    EXPECT_EQ(requested, kRounds) << "hospital-" << i;
    EXPECT_EQ(sent, i == kHospitals ? 0 : kRounds) << "hospital-" << i;
    EXPECT_EQ(refused, i == kHospitals ? kRounds : 0) << "hospital-" << i;
    EXPECT_EQ(finals, i == kHospitals ? 0 : 1) << "hospital-" << i;
  }
}

}  // namespace
}  // namespace fedcore
