// Issue 19: the README's federation, on the breast-cancer CSV as shipped (unscaled), split
// non-IID (label skew, Dirichlet 0.5) across three hospitals: one real server, three real
// daemons, mutual TLS on loopback, real SQLite. With the federated feature scale (the
// default) the held-out accuracy after 5 rounds is at least 95%; the stored scale is the
// pooled statistics of the sites' training splits; a restarted server keeps it.
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "client/data_source.hpp"
#include "shared/data/csv.hpp"
#include "shared/data/feature_stats.hpp"
#include "shared/data/normalize.hpp"
#include "shared/data/partition.hpp"
#include "shared/data/split.hpp"
#include "shared/model/param_io.hpp"
#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"
#include "shared/util/source_tree.hpp"
#include "tests/federation/federation_fixture.hpp"

namespace fedcore {
namespace {

using testing::Federation;
using testing::TempDir;

constexpr int kSites = 3;

// The README's run.json, for three hospitals and a held-out set the server evaluates.
std::string readme_run(const std::string& held_out, int rounds) {
  nlohmann::json j = {{"name", "bc"},
                      {"model", {{"type", "logreg"}}},
                      {"rounds", rounds},
                      {"clients_per_round", kSites},
                      {"min_clients", kSites},
                      {"optimizer", {{"kind", "sgd"}, {"lr", 0.1}}},
                      {"round_timeout_s", 60},
                      {"wait_for_clients_s", 60},
                      {"server_test_set", held_out},
                      {"label_column", "benign"}};
  return j.dump();
}

// The shipped table, 25% held out (stratified), the rest dealt to three hospitals with
// label skew; each hospital's CSV is written unscaled, as a hospital would export it.
struct Split {
  data::Dataset held_out;
  std::vector<client::DataSource> sites;
};

Split write_sites(const TempDir& dir) {
  auto table = data::load_csv(fedcore::source_path("data/breast_cancer_wisconsin.csv"),
                              {.label_column = "benign"});
  EXPECT_TRUE(table) << table.error().to_string();
  auto split = data::stratified_split(*table, 0.25, 7);
  const auto parts =
      data::partition_dirichlet(split.train.labels, split.train.num_classes, kSites, 0.5, 11);
  Split out;
  for (int i = 0; i < kSites; ++i) {
    const auto site = split.train.subset(parts[static_cast<std::size_t>(i)]);
    const auto path = dir.path("hospital-" + std::to_string(i + 1) + ".csv");
    testing::write_csv(site, path, "benign");
    const auto counts = site.label_counts();
    std::printf("hospital-%d: %zu patients, %zu malignant, %zu benign\n", i + 1, site.size(),
                counts[0], counts[1]);
    client::DataSource source;
    source.format = "csv";
    source.path = path;
    source.label_column = "benign";
    out.sites.push_back(source);
  }
  testing::write_csv(split.test, dir.path("held-out.csv"), "benign");
  // The held-out set as the server reads it back from its CSV.
  auto held_out = data::load_csv(dir.path("held-out.csv"), {.label_column = "benign"});
  EXPECT_TRUE(held_out) << held_out.error().to_string();
  out.held_out = std::move(*held_out);
  return out;
}

// Returns the server's port.
std::uint16_t start_federation(Federation& federation, const Split& split) {
  for (int i = 1; i <= kSites; ++i) {
    federation.add_client_certificate("hospital-" + std::to_string(i));
  }
  const auto port = federation.start_server();
  for (int i = 0; i < kSites; ++i) {
    federation.start_client("hospital-" + std::to_string(i + 1),
                            split.sites[static_cast<std::size_t>(i)]);
  }
  return port;
}

std::vector<double> accuracies(store::HistoryStore& history, std::int64_t run) {
  std::vector<double> out;
  for (const auto& r : *history.list_rounds(run)) {
    if (r.state == store::RoundState::committed && r.eval_accuracy) {
      out.push_back(*r.eval_accuracy);
    }
  }
  return out;
}

void print(const char* what, const std::vector<double>& values) {
  std::printf("%s:", what);
  for (double v : values) {
    std::printf(" %.4f", v);
  }
  std::printf("\n");
}

TEST(FeatureScalingE2e, ReadmeFederationReaches95PercentHeldOutAccuracyIn5Rounds) {
  TempDir dir;
  const auto split = write_sites(dir);
  Federation federation(dir);
  start_federation(federation, split);
  auto run = federation.start_run(readme_run(dir.path("held-out.csv"), 5));
  ASSERT_TRUE(run) << run.error().to_string();
  ASSERT_TRUE(federation.wait_until([&] { return federation.ended().has_value(); }))
      << "run did not end in time";
  EXPECT_EQ(*federation.ended(), store::RunState::finished);
  EXPECT_EQ(federation.rounds_committed(), 5);
  federation.stop();

  auto history = federation.open_store();
  const auto per_round = accuracies(history, *run);
  print("held-out accuracy per round (federated scaling)", per_round);
  ASSERT_EQ(per_round.size(), 5u);
  EXPECT_GE(per_round.back(), 0.95) << "held-out accuracy after 5 rounds";

  // The stored scale is the mean and standard deviation of the union of the sites'
  // training splits (each hospital keeps 20% of its CSV as its local test split).
  auto scale = history.feature_scale(*run);
  ASSERT_TRUE(scale) << scale.error().to_string();
  ASSERT_TRUE(scale->has_value());
  EXPECT_EQ((*scale)->sites, kSites);
  // The sites' training splits as their daemons load them; two passes over the pooled
  // values are the reference.
  std::vector<data::Dataset> trains;
  std::size_t pooled = 0;
  for (const auto& source : split.sites) {
    auto local = client::load_local_data(source);
    ASSERT_TRUE(local) << local.error().to_string();
    pooled += local->train.size();
    trains.push_back(std::move(local->train));
  }
  EXPECT_EQ((*scale)->samples, static_cast<std::int64_t>(pooled));
  ASSERT_EQ((*scale)->mean.size(), 30u);
  std::vector<double> sum(30, 0.0);
  std::vector<double> square(30, 0.0);
  for (const auto& train : trains) {
    for (Eigen::Index f = 0; f < 30; ++f) {
      sum[static_cast<std::size_t>(f)] += train.features.row(f).cast<double>().sum();
    }
  }
  for (const auto& train : trains) {
    for (Eigen::Index f = 0; f < 30; ++f) {
      const double mean = sum[static_cast<std::size_t>(f)] / double(pooled);
      square[static_cast<std::size_t>(f)] +=
          (train.features.row(f).cast<double>().array() - mean).square().sum();
    }
  }
  for (std::size_t f = 0; f < 30; ++f) {
    const double mean = sum[f] / double(pooled);
    const double stddev = std::sqrt(square[f] / double(pooled));
    EXPECT_NEAR((*scale)->mean[f], mean, 1e-9 * std::max(1.0, std::abs(mean))) << f;
    EXPECT_NEAR((*scale)->stddev[f], stddev, 1e-9 * std::max(1.0, stddev)) << f;
  }

  // The server evaluated the last checkpoint on the held-out set scaled with the stored
  // scale: recompute it.
  auto checkpoints = history.list_checkpoints(*run);
  ASSERT_TRUE(checkpoints);
  ASSERT_EQ(checkpoints->size(), 5u);
  auto spec =
      model::complete_spec(*model::parse_model_spec(std::string_view(R"({"type":"logreg"})")),
                           split.held_out.sample_shape, 2);
  auto final_model = model::build_model(*spec);
  ASSERT_TRUE(model::load_params_into(checkpoints->back().ref.path, *final_model));
  auto held_out = split.held_out;
  data::FeatureScale{(*scale)->mean, (*scale)->stddev}.standardizer().apply(held_out);
  const auto recomputed =
      model::evaluate(*final_model, model::LossKind::binary_cross_entropy, held_out);
  EXPECT_NEAR(recomputed.accuracy, per_round.back(), 1e-9);
}

// The same federation on the features as loaded (what the README example did before) and
// with each site's own statistics. Recorded for docs/results.md; only the endings and
// that no scale is stored are asserted.
TEST(FeatureScalingE2e, WithoutAFederatedScaleTheSameFederationIsRecordedForComparison) {
  for (const auto mode : {protocol::ScalingMode::none, protocol::ScalingMode::site}) {
    TempDir dir;
    const auto split = write_sites(dir);
    Federation federation(dir);
    start_federation(federation, split);
    auto config = federation::parse_run_config(readme_run(dir.path("held-out.csv"), 5));
    ASSERT_TRUE(config) << config.error().to_string();
    config->feature_scaling = mode;
    auto run =
        federation.call([&](federation::FederationServer& s) { return s.start_run(*config); });
    ASSERT_TRUE(run) << run.error().to_string();
    ASSERT_TRUE(federation.wait_until([&] { return federation.ended().has_value(); }));
    EXPECT_EQ(*federation.ended(), store::RunState::finished);
    federation.stop();
    auto history = federation.open_store();
    const auto what = "held-out accuracy per round (" +
                      std::string(protocol::scaling_mode_name(mode)) + " scaling)";
    print(what.c_str(), accuracies(history, *run));
    EXPECT_FALSE(history.feature_scale(*run)->has_value());
  }
}

// A server restarted mid-run resumes with the stored scale: the sites are asked once. The
// run is manual, so the restart lands between rounds 2 and 3 whatever the machine's speed
// (an automatic run could finish its last rounds between the test seeing round 2 and the
// server stopping, and then nothing would resume).
TEST(FeatureScalingE2e, ARestartedServerKeepsTheRunsScale) {
  TempDir dir;
  const auto split = write_sites(dir);
  Federation federation(dir);
  const auto port = start_federation(federation, split);
  auto config = nlohmann::json::parse(readme_run(dir.path("held-out.csv"), 4));
  config["manual"] = true;
  auto run = federation.start_run(config.dump());
  ASSERT_TRUE(run) << run.error().to_string();
  const auto play_round = [&](int committed_after) {
    ASSERT_TRUE(federation.poll_server([](federation::FederationServer& s) {
      return s.status().waiting_for_admin;
    })) << "the run did not wait for round "
        << committed_after;
    auto advanced =
        federation.call([&](federation::FederationServer& s) { return s.advance_round(*run); });
    ASSERT_TRUE(advanced) << advanced.error().to_string();
    ASSERT_TRUE(federation.wait_until([&] {
      return federation.rounds_committed() >= committed_after;
    })) << "round "
        << committed_after << " did not commit";
  };
  play_round(1);
  play_round(2);
  federation.stop_server();
  federation::ServerOptions same_port;
  same_port.port = port;  // where the daemons reconnect
  federation.start_server(same_port);
  play_round(3);
  play_round(4);
  ASSERT_TRUE(federation.wait_until([&] { return federation.ended().has_value(); }))
      << "the resumed run did not end in time";
  EXPECT_EQ(*federation.ended(), store::RunState::finished);
  federation.stop();

  auto history = federation.open_store();
  auto events = history.list_events(0, 1000);
  ASSERT_TRUE(events);
  int requested = 0;
  std::vector<nlohmann::json> scaling;
  for (const auto& e : *events) {
    if (e.kind == "feature_stats_requested") {
      ++requested;
    }
    if (e.kind == "feature_scaling") {
      scaling.push_back(nlohmann::json::parse(e.detail_json));
    }
  }
  EXPECT_EQ(requested, 1);
  ASSERT_EQ(scaling.size(), 2u);
  EXPECT_EQ(scaling[0]["mode"], "federated");
  EXPECT_EQ(scaling[1]["mode"], "federated");
  EXPECT_EQ(scaling[1]["stored"], true);
  const auto per_round = accuracies(history, *run);
  ASSERT_EQ(per_round.size(), 4u);
  EXPECT_GE(per_round.back(), 0.9);
}

}  // namespace
}  // namespace fedcore
