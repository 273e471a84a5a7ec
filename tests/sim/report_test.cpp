#include "sim/report.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim/progress.hpp"

namespace fedcore::sim {
namespace {

std::vector<RoundRow> three_rounds() {
  std::vector<RoundRow> rows(3);
  const double accuracy[] = {0.5, 0.86, 0.84};
  for (int i = 0; i < 3; ++i) {
    rows[i].round = i + 1;
    rows[i].accuracy = accuracy[i];
    rows[i].loss = 1.0 / (i + 1);
    rows[i].selected = 4;
    rows[i].participants = 4 - i;
    rows[i].dropped = i;
    rows[i].bytes_up = 1000;
    rows[i].bytes_down = 2000;
    rows[i].duration_s = 0.5;
  }
  return rows;
}

TEST(SimReport, RoundsToReachIsTheFirstRoundAtOrAboveTheTarget) {
  const auto rows = three_rounds();
  EXPECT_EQ(rounds_to_reach(rows, 0.5), 1);
  EXPECT_EQ(rounds_to_reach(rows, 0.85), 2);
  EXPECT_EQ(rounds_to_reach(rows, 0.9), std::nullopt);
}

TEST(SimReport, RoundsCsvHasAHeaderAndOneLinePerRound) {
  const auto csv = rounds_csv(three_rounds());
  EXPECT_EQ(csv.rfind("round,accuracy,loss,participants,rejected,dropped,timed_out,bytes_up,"
                      "bytes_down,duration_s,",
                      0),
            0u);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  EXPECT_NE(csv.find("\n2,0.860000,0.500000,3,0,1,0,1000,2000,0.500,"), std::string::npos);
}

TEST(SimReport, SummaryHoldsFinalBestTargetsBytesAndConfig) {
  SimOptions o;
  o.targets = {0.8, 0.85, 0.89};
  FederatedResult fed;
  fed.rounds = three_rounds();
  fed.end_state = "finished";
  fed.faults.drops = 3;
  BaselineResult base;
  base.epochs = 2;
  base.curve = {{1, 0.7, 0.9, 1.0, 1.0}, {2, 0.88, 0.4, 0.5, 1.0}};
  const auto j = summary_json(o, &fed, &base, 12.5, 1 << 20);
  EXPECT_DOUBLE_EQ(j["federated"]["final_accuracy"].get<double>(), 0.84);
  EXPECT_DOUBLE_EQ(j["federated"]["best_accuracy"].get<double>(), 0.86);
  EXPECT_EQ(j["federated"]["best_round"], 2);
  EXPECT_EQ(j["federated"]["rounds_to_target"]["0.80"], 2);
  EXPECT_EQ(j["federated"]["rounds_to_target"]["0.85"], 2);
  EXPECT_TRUE(j["federated"]["rounds_to_target"]["0.89"].is_null());
  EXPECT_EQ(j["federated"]["bytes_up"], 3000);
  EXPECT_EQ(j["federated"]["bytes_down"], 6000);
  EXPECT_EQ(j["federated"]["dropped"], 3);
  EXPECT_EQ(j["federated"]["faults"]["drops_injected"], 3);
  EXPECT_EQ(j["baseline"]["epochs_to_target"]["0.85"], 2);
  EXPECT_DOUBLE_EQ(j["baseline"]["final_accuracy"].get<double>(), 0.88);
  EXPECT_EQ(j["config"]["clients"], 10);
  EXPECT_DOUBLE_EQ(j["wall_s"].get<double>(), 12.5);
}

TEST(SimProgress, BarShowsCountElapsedAndEta) {
  EXPECT_EQ(Progress::bar(5, 10, 30.0),
            "[###############...............] 5/10  elapsed 30s  ETA 30s");
  EXPECT_EQ(Progress::bar(10, 10, 75.0), "[##############################] 10/10  elapsed 1m15s");
  EXPECT_EQ(Progress::duration(3725), "1h02m");
}

}  // namespace
}  // namespace fedcore::sim
