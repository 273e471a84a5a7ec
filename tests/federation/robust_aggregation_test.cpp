#include "server/federation/robust_aggregation.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/federation/robust_strategy.hpp"
#include "shared/util/rng.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::federation {
namespace {

using Rows = std::vector<std::vector<float>>;

constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();

// A buffer holding `rows`, all in memory unless a budget is given.
std::unique_ptr<UpdateBuffer> buffer_of(const Rows& rows, std::size_t budget = kUnlimited,
                                        const std::filesystem::path& scratch = {}) {
  auto buffer = std::make_unique<UpdateBuffer>(rows.at(0).size(), budget, scratch);
  for (const auto& row : rows) {
    auto added = buffer->add(row);
    EXPECT_TRUE(added) << added.error().message;
  }
  return buffer;
}

std::vector<float> median_of(const Rows& rows) {
  auto buffer = buffer_of(rows);
  std::vector<float> out(rows[0].size());
  coordinate_median(*buffer, out);
  return out;
}

std::vector<float> trimmed_mean_of(const Rows& rows, double beta) {
  auto buffer = buffer_of(rows);
  std::vector<float> out(rows[0].size());
  trimmed_mean(*buffer, beta, out);
  return out;
}

Rows random_rows(std::size_t n, std::size_t dim, std::uint64_t seed) {
  Rng rng(seed);
  Rows rows(n, std::vector<float>(dim));
  for (auto& row : rows) {
    for (auto& v : row) {
      v = static_cast<float>(rng.normal());
    }
  }
  return rows;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- Coordinate-wise median -------------------------------------------------------------

TEST(CoordinateMedian, OddCountTakesTheMiddleValueWithTies) {
  const Rows rows{{1, 5, -2}, {3, 1, -2}, {2, 9, 7}};
  EXPECT_EQ(median_of(rows), (std::vector<float>{2, 5, -2}));
}

TEST(CoordinateMedian, EvenCountAveragesTheTwoMiddleValues) {
  const Rows rows{{1, 10, 0.5f}, {4, 20, 0.5f}, {2, 30, 0.5f}, {100, -5, 1.5f}};
  // Sorted: {1, 2, 4, 100} -> (2 + 4) / 2; {-5, 10, 20, 30} -> 15; {.5, .5, .5, 1.5} -> .5
  EXPECT_EQ(median_of(rows), (std::vector<float>{3, 15, 0.5f}));
}

TEST(CoordinateMedian, OneUpdateIsItself) {
  EXPECT_EQ(median_of({{-1.25f, 7}}), (std::vector<float>{-1.25f, 7}));
}

TEST(CoordinateMedian, TwoOfFiveArbitraryUpdatesCannotLeaveTheHonestRange) {
  const Rows rows{{1}, {1e30f}, {2}, {-1e30f}, {3}};
  EXPECT_EQ(median_of(rows), (std::vector<float>{2}));
  const Rows pulled{{1}, {1e30f}, {2}, {1e30f}, {3}};
  EXPECT_EQ(median_of(pulled), (std::vector<float>{3}));
}

// ---- Trimmed mean -----------------------------------------------------------------------

TEST(TrimmedMean, DropsFloorBetaNFromEachEnd) {
  // n = 5, beta = 0.2: one from each end. {1, 2, 3, 4, 100} -> (2 + 3 + 4) / 3;
  // {-50, 0, 0, 1, 2} -> (0 + 0 + 1) / 3; {5, 5, 5, 1, 9} -> 5 (ties).
  const Rows rows{{100, 0, 5}, {3, -50, 5}, {1, 2, 5}, {4, 1, 1}, {2, 0, 9}};
  EXPECT_EQ(trimmed_mean_of(rows, 0.2), (std::vector<float>{3, float(1.0 / 3.0), 5}));
}

TEST(TrimmedMean, EvenCountAndTheFloorOfBetaN) {
  const Rows rows{{1}, {100}, {4}, {2}};
  EXPECT_EQ(trimmed_mean_of(rows, 0.25), (std::vector<float>{3}));  // floor(1) = 1: (2+4)/2
  // floor(0.24 * 4) = 0: nothing trimmed, the plain mean 107 / 4.
  EXPECT_EQ(trimmed_mean_of(rows, 0.24), (std::vector<float>{26.75f}));
  EXPECT_EQ(trimmed_mean_of(rows, 0.0), (std::vector<float>{26.75f}));
  // floor(0.49 * 4) = 1 as well.
  EXPECT_EQ(trimmed_mean_of(rows, 0.49), (std::vector<float>{3}));
}

TEST(TrimmedMean, IsTheSameBitsInAnyArrivalOrder) {
  auto rows = random_rows(9, 5000, 11);
  const auto first = trimmed_mean_of(rows, 0.2);
  std::reverse(rows.begin(), rows.end());
  EXPECT_TRUE(same_bits(trimmed_mean_of(rows, 0.2), first));
  std::rotate(rows.begin(), rows.begin() + 4, rows.end());
  EXPECT_TRUE(same_bits(trimmed_mean_of(rows, 0.2), first));
}

// ---- Krum and Multi-Krum ----------------------------------------------------------------

// Five honest updates around the origin and two far outliers close to each other; f = 2,
// n = 7 > 2f + 2, so each score counts the n - f - 2 = 3 closest others.
//   row 0  B ( 1,  0)   squared distances A 1, C 5, D 4, E 2        -> 1 + 2 + 4 = 7
//   row 1  O (50, 50)   O' 4, C 4804, B 4901, A 5000, ...            -> 9709
//   row 2  C ( 0,  2)   A 4, B 5, D 5, E 9                          -> 4 + 5 + 5 = 14
//   row 3  D (-1,  0)   A 1, B 4, C 5, E 2                          -> 1 + 2 + 4 = 7
//   row 4  O'(50, 52)   O 4, C 5000, B 5105, A 5204, ...             -> 10109
//   row 5  A ( 0,  0)   B 1, C 4, D 1, E 1                          -> 1 + 1 + 1 = 3
//   row 6  E ( 0, -1)   A 1, B 2, C 9, D 2                          -> 1 + 2 + 2 = 5
const Rows kKrumRows{{1, 0}, {50, 50}, {0, 2}, {-1, 0}, {50, 52}, {0, 0}, {0, -1}};

TEST(Krum, ScoresSumTheSquaredDistancesToTheNMinusFMinus2Closest) {
  auto buffer = buffer_of(kKrumRows);
  EXPECT_EQ(krum_scores(*buffer, 2), (std::vector<double>{7, 9709, 14, 7, 10109, 3, 5}));
}

TEST(Krum, PicksTheHonestUpdateAtTheCentreOfTheCluster) {
  auto buffer = buffer_of(kKrumRows);
  EXPECT_EQ(krum_select(*buffer, 2, 1), (std::vector<std::size_t>{5}));
}

TEST(MultiKrum, AveragesTheMBestScoredWithTiesToTheLowerIndex) {
  auto buffer = buffer_of(kKrumRows);
  // Scores 3 (row 5), 5 (row 6), then 7 for rows 0 and 3: row 0 goes first.
  const auto chosen = krum_select(*buffer, 2, 3);
  EXPECT_EQ(chosen, (std::vector<std::size_t>{5, 6, 0}));
  std::vector<float> out(2);
  mean_of_rows(*buffer, chosen, out);
  // A, E, B: ((0 + 0 + 1) / 3, (0 - 1 + 0) / 3)
  EXPECT_EQ(out, (std::vector<float>{float(1.0 / 3.0), float(-1.0 / 3.0)}));
  // m = n - f = 5: the five honest ones, mean (0, 1/5).
  EXPECT_EQ(krum_select(*buffer, 2, 5), (std::vector<std::size_t>{5, 6, 0, 3, 2}));
}

TEST(Krum, TheStrategyReturnsTheChosenUpdateWhateverTheSampleCounts) {
  StrategyConfig config;
  config.name = "krum";
  config.byzantine = 2;
  auto strategy = make_robust_strategy(config, 2);
  ASSERT_TRUE(strategy) << strategy.error().message;
  const std::vector<float> global{0, 0};
  (*strategy)->begin_round(global, 1);
  for (std::size_t i = 0; i < kKrumRows.size(); ++i) {
    // The outliers claim a billion samples each: unweighted, it buys them nothing.
    (*strategy)->add_update(kKrumRows[i], i == 1 || i == 4 ? 1'000'000'000 : 1);
  }
  EXPECT_EQ((*strategy)->refuse_finish(), std::nullopt);
  EXPECT_EQ((*strategy)->finish_round(), (std::vector<float>{0, 0}));
}

TEST(MultiKrum, TheStrategyAveragesNMinusFByDefault) {
  StrategyConfig config;
  config.name = "multi_krum";
  config.byzantine = 2;
  auto strategy = make_robust_strategy(config, 2);
  ASSERT_TRUE(strategy) << strategy.error().message;
  const std::vector<float> global{0, 0};
  (*strategy)->begin_round(global, 1);
  for (const auto& row : kKrumRows) {
    (*strategy)->add_update(row, 1);
  }
  // B, C, D, A, E: ((1 + 0 - 1 + 0 + 0) / 5, (0 + 2 + 0 + 0 - 1) / 5)
  EXPECT_EQ((*strategy)->finish_round(), (std::vector<float>{0, float(1.0 / 5.0)}));
}

// ---- Bulyan -----------------------------------------------------------------------------

// n = 7, f = 1: theta = n - 2f = 5 chosen by repeated Krum, then per coordinate the
// beta = theta - 2f = 3 values closest to the median averaged. Scores (squared distances to
// the |R| - f - 2 closest, at least 1):
//   |R| = 7, 4 closest: r0 185, r1 175, r2 150, r3 8963, r4 91, r5 110, r6 205  -> r4
//   |R| = 6, 3 closest: r0 160, r1 143, r2 121, r3 6558, r5 105, r6 168         -> r5
//   |R| = 5, 2 closest: r0 120, r1 114, r2 85, r3 4100, r6 100                  -> r2
//   |R| = 4, 1 closest: r0 20, r1 109, r3 1954, r6 20 (r0, r6 each other's)     -> r0
//   |R| = 3, 1 closest: r1 109, r3 2146, r6 109                                 -> r1
// Chosen r4, r5, r2, r0, r1 (the outlier r3 and the far r6 are out).
//   coordinate 0: {-3, -2, 2, 3, 5}, median 2; closest 2, 3, 5 (-2 is 4 away) -> 10 / 3
//   coordinate 1: {-3, 1, 3, 3, 5}, median 3; 3, 3, then 1 and 5 both 2 away: the lower
//                 one, 1 -> 7 / 3
TEST(Bulyan, SelectsByRepeatedKrumAndAveragesTheValuesClosestToTheMedian) {
  const Rows rows{{5, -3}, {-2, 5}, {-3, 3}, {40, -30}, {2, 1}, {3, 3}, {1, -5}};
  auto buffer = buffer_of(rows);
  std::vector<float> out(2);
  bulyan(*buffer, 1, out);
  EXPECT_EQ(out, (std::vector<float>{float(10.0 / 3.0), float(7.0 / 3.0)}));
  // The coordinate median of all seven would be (2, 1): the selection matters.
  EXPECT_EQ(median_of(rows), (std::vector<float>{2, 1}));
}

TEST(Bulyan, WithNoFaultsIsTheMean) {
  const Rows rows{{1, 8}, {2, 0}, {6, 1}};
  auto buffer = buffer_of(rows);
  std::vector<float> out(2);
  bulyan(*buffer, 0, out);
  EXPECT_EQ(out, (std::vector<float>{3, 3}));
}

// ---- Centered clipping ------------------------------------------------------------------

// Around v0 = (0, 0) with tau = 2: x1 = (1, 0), x2 = (0, 1) and the outlier x3 = (100, 0).
const Rows kClippingRows{{1, 0}, {0, 1}, {100, 0}};

std::vector<float> clipped(std::size_t iterations) {
  auto buffer = buffer_of(kClippingRows);
  const std::vector<float> global{0, 0};
  std::vector<float> out(2);
  centered_clipping(*buffer, global, 2.0, iterations, out);
  return out;
}

TEST(CenteredClipping, OneIterationClipsTheOutlierToTheRadius) {
  // Distances 1, 1, 100: the outlier's term (100, 0) is scaled by 2 / 100 to (2, 0).
  // v1 = ((1 + 0 + 2) / 3, (0 + 1 + 0) / 3) = (1, 1/3); the plain mean is (33.67, 0.33).
  const auto v1 = clipped(1);
  EXPECT_FLOAT_EQ(v1[0], 1.0f);
  EXPECT_FLOAT_EQ(v1[1], float(1.0 / 3.0));
}

TEST(CenteredClipping, TwoIterationsStartFromTheFirstResult) {
  // From v1 = (1, 1/3): x1 - v1 = (0, -1/3) and x2 - v1 = (-1, 2/3) are inside the radius;
  // x3 - v1 = (99, -1/3) has norm sqrt(88210) / 3, so its term is scaled by 6 / sqrt(88210):
  // (594, -2) / sqrt(88210). v2 = v1 + (sum of the three terms) / 3.
  const double r = std::sqrt(88210.0);
  const double x = 1 + (0 - 1 + 594 / r) / 3;
  const double y = 1.0 / 3 + (-1.0 / 3 + 2.0 / 3 - 2 / r) / 3;
  const auto v2 = clipped(2);
  EXPECT_NEAR(v2[0], x, 1e-6);  // 1.3333296
  EXPECT_NEAR(v2[1], y, 1e-6);  // 0.4421997
  EXPECT_NEAR(x, 1.3333296, 1e-7);
}

TEST(CenteredClipping, AnUpdateAtTheCentreAddsNothing) {
  auto buffer = buffer_of({{3, 4}, {3, 4}});
  const std::vector<float> global{3, 4};
  std::vector<float> out(2);
  centered_clipping(*buffer, global, 0.5, 3, out);
  EXPECT_EQ(out, global);
}

// The streaming form (one iteration, no buffer) and the buffered one over the same updates
// in the same order: the same bits, over several blocks and a partial one.
TEST(CenteredClipping, TheStreamingStepIsTheBufferedOneBitForBit) {
  const std::size_t dim = 2 * kCoordinateBlock + 123;
  auto rows = random_rows(6, dim, 5);
  for (auto& v : rows[2]) {
    v *= 1000;  // an outlier, clipped
  }
  const auto global = random_rows(1, dim, 6)[0];
  auto buffer = buffer_of(rows);
  std::vector<float> buffered(dim);
  centered_clipping(*buffer, global, 10.0, 1, buffered);

  ClippedStepSum sum;
  sum.begin(global, 10.0);
  for (const auto& row : rows) {
    sum.add(row);
  }
  std::vector<float> streamed(dim);
  sum.finish(streamed);
  EXPECT_TRUE(same_bits(streamed, buffered));
  EXPECT_FALSE(same_bits(streamed, global));
}

// ---- The blocked passes against a plain per-coordinate computation ---------------------

// Several blocks and a partial one: the block bookkeeping must not change any coordinate.
TEST(RobustAggregation, BlockedPassesMatchAPlainComputationAcrossBlocks) {
  const std::size_t dim = 2 * kCoordinateBlock + 77;
  const auto rows = random_rows(8, dim, 21);
  auto buffer = buffer_of(rows);
  std::vector<float> median(dim);
  std::vector<float> trimmed(dim);
  coordinate_median(*buffer, median);
  trimmed_mean(*buffer, 0.25, trimmed);
  for (std::size_t c = 0; c < dim; ++c) {
    std::vector<float> v;
    for (const auto& row : rows) {
      v.push_back(row[c]);
    }
    std::sort(v.begin(), v.end());
    ASSERT_EQ(median[c], float((double(v[3]) + double(v[4])) / 2)) << c;
    ASSERT_EQ(trimmed[c], float((double(v[2]) + v[3] + v[4] + v[5]) / 4)) << c;
  }
  const auto distances = pairwise_squared_distances(*buffer);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (std::size_t j = 0; j < rows.size(); ++j) {
      double expected = 0;
      for (std::size_t c = 0; c < dim; ++c) {
        expected += (double(rows[i][c]) - rows[j][c]) * (double(rows[i][c]) - rows[j][c]);
      }
      ASSERT_NEAR(distances[i * rows.size() + j], expected, 1e-9 * (1 + expected));
    }
  }
}

// ---- Strategies: refusals ---------------------------------------------------------------

StrategyConfig config_for(std::string name) {
  StrategyConfig config;
  config.name = std::move(name);
  return config;
}

TEST(CheckRobustConfig, KrumNeedsMoreThan2fPlus2) {
  auto config = config_for("krum");
  config.byzantine = 3;
  EXPECT_EQ(check_robust_config(config, 7),
            "krum with byzantine = 3 needs more than 2f + 2 = 8 updates per round; "
            "clients_per_round is 7");
  EXPECT_EQ(check_robust_config(config, 8),
            "krum with byzantine = 3 needs more than 2f + 2 = 8 updates per round; "
            "clients_per_round is 8");
  EXPECT_EQ(check_robust_config(config, 9), std::nullopt);
}

TEST(CheckRobustConfig, MultiKrumNeedsMoreThan2fPlus2AndMAtMostNMinusF) {
  auto config = config_for("multi_krum");
  config.byzantine = 1;
  EXPECT_EQ(check_robust_config(config, 4),
            "multi_krum with byzantine = 1 needs more than 2f + 2 = 4 updates per round; "
            "clients_per_round is 4");
  config.byzantine = 2;
  config.krum_selected = 6;
  EXPECT_EQ(check_robust_config(config, 7),
            "multi_krum with krum_selected = 6 and byzantine = 2 needs at least m + f = 8 "
            "updates per round (m <= n - f); clients_per_round is 7");
  EXPECT_EQ(check_robust_config(config, 8), std::nullopt);
  config.krum_selected = 0;  // n - f
  EXPECT_EQ(check_robust_config(config, 7), std::nullopt);
}

TEST(CheckRobustConfig, BulyanNeeds4fPlus3) {
  auto config = config_for("bulyan");
  config.byzantine = 1;
  EXPECT_EQ(check_robust_config(config, 6),
            "bulyan with byzantine = 1 needs at least 4f + 3 = 7 updates per round; "
            "clients_per_round is 6");
  EXPECT_EQ(check_robust_config(config, 7), std::nullopt);
  config.byzantine = 0;
  EXPECT_EQ(check_robust_config(config, 3), std::nullopt);
  EXPECT_EQ(check_robust_config(config, 2),
            "bulyan with byzantine = 0 needs at least 4f + 3 = 3 updates per round; "
            "clients_per_round is 2");
}

TEST(CheckRobustConfig, TrimmedMeanMustKeepAValueAndEveryRuleNeedsAnUpdate) {
  auto config = config_for("trimmed_mean");
  config.trim_fraction = 0.4;
  EXPECT_EQ(check_robust_config(config, 0),
            "trimmed_mean with trim_fraction = 0.4 keeps n - 2 floor(beta n) = 0 updates per "
            "coordinate and needs at least 1; clients_per_round is 0");
  EXPECT_EQ(check_robust_config(config, 1), std::nullopt);
  EXPECT_EQ(check_robust_config(config, 5), std::nullopt);  // 5 - 2 * 2 = 1
  EXPECT_EQ(check_robust_config(config_for("median"), 0),
            "median needs at least 1 update per round; clients_per_round is 0");
  EXPECT_EQ(check_robust_config(config_for("centered_clipping"), 0),
            "centered_clipping needs at least 1 update per round; clients_per_round is 0");
  EXPECT_EQ(check_robust_config(config_for("median"), 1), std::nullopt);
}

TEST(CheckRobustConfig, OtherStrategiesAreNotItsConcernButBadOptionsAre) {
  auto fedavg = config_for("fedavg");
  fedavg.byzantine = 100;
  EXPECT_EQ(check_robust_config(fedavg, 1), std::nullopt);
  auto trimmed = config_for("trimmed_mean");
  trimmed.trim_fraction = 0.5;
  EXPECT_EQ(check_robust_config(trimmed, 100),
            "trimmed_mean needs trim_fraction in [0, 0.5); it is 0.5");
}

// The message of make_robust_strategy's refusal, or "" when it made a strategy.
std::string refusal(const StrategyConfig& config) {
  auto made = make_robust_strategy(config, 10);
  if (made) {
    return "";
  }
  EXPECT_EQ(made.error().code, errc::invalid_argument);
  return made.error().message;
}

TEST(MakeRobustStrategy, RefusesUnknownNamesAndImpossibleOptions) {
  EXPECT_EQ(refusal(config_for("fedavg")),
            "unknown robust strategy 'fedavg' (robust: median, trimmed_mean, krum, multi_krum, "
            "bulyan, centered_clipping)");
  auto trimmed = config_for("trimmed_mean");
  trimmed.trim_fraction = 0.5;
  EXPECT_EQ(refusal(trimmed), "trimmed_mean needs trim_fraction in [0, 0.5); it is 0.5");
  trimmed.trim_fraction = -0.1;
  EXPECT_EQ(refusal(trimmed), "trimmed_mean needs trim_fraction in [0, 0.5); it is -0.1");
  trimmed.trim_fraction = 0;
  EXPECT_EQ(refusal(trimmed), "");

  auto clipping = config_for("centered_clipping");
  clipping.clipping_radius = 0;
  EXPECT_EQ(refusal(clipping), "centered_clipping needs a finite clipping_radius above 0; it is 0");
  clipping.clipping_radius = std::numeric_limits<double>::infinity();
  EXPECT_EQ(refusal(clipping),
            "centered_clipping needs a finite clipping_radius above 0; it is inf");
  clipping.clipping_radius = 0.5;
  clipping.clipping_iterations = 0;
  EXPECT_EQ(refusal(clipping),
            "centered_clipping needs clipping_iterations from 1 to 100; it is 0");
  clipping.clipping_iterations = 101;
  EXPECT_EQ(refusal(clipping),
            "centered_clipping needs clipping_iterations from 1 to 100; it is 101");
  clipping.clipping_iterations = 100;
  EXPECT_EQ(refusal(clipping), "");

  auto krum = config_for("krum");
  krum.krum_selected = 3;
  EXPECT_EQ(refusal(krum),
            "krum selects exactly one update, so krum_selected = 3 does not apply (multi_krum "
            "averages krum_selected updates)");
  krum.name = "multi_krum";
  EXPECT_EQ(refusal(krum), "");

  auto bulyan_config = config_for("bulyan");
  bulyan_config.byzantine = (std::size_t{1} << 32) + 1;
  EXPECT_EQ(refusal(bulyan_config), "bulyan's byzantine = 4294967297 is above 2^32");
  auto multi = config_for("multi_krum");
  multi.krum_selected = std::numeric_limits<std::size_t>::max();
  EXPECT_EQ(refusal(multi), "multi_krum's krum_selected = 18446744073709551615 is above 2^32");
}

TEST(MakeRobustStrategy, MakesEveryRobustStrategyUnderItsName) {
  for (const char* name :
       {"median", "trimmed_mean", "krum", "multi_krum", "bulyan", "centered_clipping"}) {
    auto made = make_robust_strategy(config_for(name), 3);
    ASSERT_TRUE(made) << name << ": " << made.error().message;
    EXPECT_EQ((*made)->name(), name);
    EXPECT_TRUE(is_robust_strategy(name));
  }
  EXPECT_FALSE(is_robust_strategy("fedavg"));
}

TEST(RobustStrategy, RefusesToFinishARoundWithTooFewUpdates) {
  auto config = config_for("krum");
  config.byzantine = 1;
  auto strategy = make_robust_strategy(config, 2);
  ASSERT_TRUE(strategy);
  const std::vector<float> global{0, 0};
  (*strategy)->begin_round(global, 100);
  for (int i = 0; i < 4; ++i) {
    (*strategy)->add_update(std::vector<float>{float(i), 0}, 1);
  }
  EXPECT_EQ((*strategy)->updates(), 4u);
  EXPECT_EQ((*strategy)->refuse_finish(),
            "krum with byzantine = 1 needs more than 2f + 2 = 4 updates per round; the round "
            "received 4");
  (*strategy)->add_update(std::vector<float>{2, 0}, 1);
  EXPECT_EQ((*strategy)->refuse_finish(), std::nullopt);
  // {0, 1, 2, 3, 2} on a line, 2 closest: row 2 scores 0 + 1 and row 4 the same; row 2 wins.
  EXPECT_EQ((*strategy)->finish_round(), (std::vector<float>{2, 0}));

  // A new round starts empty.
  (*strategy)->begin_round(global, 100);
  EXPECT_EQ((*strategy)->updates(), 0u);
  EXPECT_EQ((*strategy)->refuse_finish(),
            "krum with byzantine = 1 needs more than 2f + 2 = 4 updates per round; the round "
            "received 0");
}

TEST(RobustStrategy, StreamingClippingRefusesAnEmptyRound) {
  auto strategy = make_robust_strategy(config_for("centered_clipping"), 2);
  ASSERT_TRUE(strategy);
  const std::vector<float> global{0, 0};
  (*strategy)->begin_round(global, 1);
  EXPECT_EQ((*strategy)->refuse_finish(),
            "centered_clipping needs at least 1 update per round; the round received 0");
}

TEST(RobustStrategy, CenteredClippingStreamsOneIterationAndBuffersMore) {
  for (std::size_t iterations : {std::size_t{1}, std::size_t{2}}) {
    auto config = config_for("centered_clipping");
    config.clipping_radius = 2;
    config.clipping_iterations = iterations;
    auto strategy = make_robust_strategy(config, 2);
    ASSERT_TRUE(strategy);
    const std::vector<float> global{0, 0};
    (*strategy)->begin_round(global, 1);
    for (const auto& row : kClippingRows) {
      (*strategy)->add_update(row, 5);
    }
    ASSERT_EQ((*strategy)->refuse_finish(), std::nullopt);
    EXPECT_EQ((*strategy)->finish_round(), clipped(iterations)) << iterations;
  }
}

// clipping_center "previous_step", by hand with tau = 1 on one parameter. Round 1 (no
// history: centre 0): steps 1, 1, -10 clip to 1, 1, -1, so x = 1/3. Round 2 from x = 1/3,
// centre x + 1/3 = 2/3: the honest models x + 1 = 4/3 lie 2/3 from it (kept), the attacker's
// x - 4 = -11/3 lies 13/3 away (clipped to -1): x = 2/3 + (2/3 + 2/3 - 1) / 3 = 7/9.
// Centred on the model instead, round 2 gives 1/3 + (1 + 1 - 1) / 3 = 2/3.
TEST(RobustStrategy, CenteredClippingOnThePreviousStepFollowsTheHonestDirection) {
  const auto two_rounds = [](const std::string& center, Strategy* restored_into) {
    auto config = config_for("centered_clipping");
    config.clipping_radius = 1;
    config.clipping_center = center;
    auto strategy = make_robust_strategy(config, 1);
    EXPECT_TRUE(strategy);
    const std::vector<float> start{0};
    (*strategy)->begin_round(start, 3);
    for (float v : {1.0f, 1.0f, -10.0f}) {
      (*strategy)->add_update(std::vector<float>{v}, 1);
    }
    const auto x = (*strategy)->finish_round();
    Strategy* second = strategy->get();
    if (restored_into != nullptr && (*strategy)->state() != nullptr) {
      EXPECT_TRUE(restored_into->restore(*(*strategy)->state()));
      second = restored_into;
    }
    second->begin_round(x, 3);
    for (float v : {x[0] + 1, x[0] + 1, x[0] - 4}) {
      second->add_update(std::vector<float>{v}, 1);
    }
    return std::pair(x[0], second->finish_round()[0]);
  };
  const auto [first, history] = two_rounds("previous_step", nullptr);
  EXPECT_NEAR(first, 1.0 / 3, 1e-6);
  EXPECT_NEAR(history, 7.0 / 9, 1e-6);
  EXPECT_NEAR(two_rounds("model", nullptr).second, 2.0 / 3, 1e-6);
  // The history is the strategy's state: a new strategy restored from it continues alike.
  auto config = config_for("centered_clipping");
  config.clipping_radius = 1;
  config.clipping_center = "previous_step";
  auto fresh = make_robust_strategy(config, 1);
  ASSERT_TRUE(fresh);
  EXPECT_NEAR(two_rounds("previous_step", fresh->get()).second, 7.0 / 9, 1e-6);
  auto model_centred = make_robust_strategy(config_for("centered_clipping"), 1);
  EXPECT_EQ((*model_centred)->state(), nullptr);
  config.clipping_iterations = 2;  // the buffered path keeps the history too
  auto buffered = make_robust_strategy(config, 1);
  ASSERT_TRUE(buffered);
  ASSERT_NE((*buffered)->state(), nullptr);
  EXPECT_EQ((*buffered)->state()->names, std::vector<std::string>{"previous_step"});
}

// A scratch file that cannot be made does not lose the update quietly: the round refuses
// to finish with the buffer's error.
TEST(RobustStrategy, AnUpdateTheBufferCouldNotKeepFailsTheRound) {
  testing::TempDir dir;
  auto config = config_for("median");
  config.memory_budget_bytes = 8;  // one row of 2 floats in memory
  config.scratch_dir = dir.root() / "missing";
  auto strategy = make_robust_strategy(config, 2);
  ASSERT_TRUE(strategy);
  const std::vector<float> global{0, 0};
  (*strategy)->begin_round(global, 1);
  (*strategy)->add_update(std::vector<float>{1, 2}, 1);
  EXPECT_EQ((*strategy)->refuse_finish(), std::nullopt);
  (*strategy)->add_update(std::vector<float>{3, 4}, 1);
  (*strategy)->add_update(std::vector<float>{5, 6}, 1);
  EXPECT_EQ((*strategy)->updates(), 3u);
  EXPECT_EQ((*strategy)->refuse_finish(),
            "median could not keep update 2 of the round: not_found: cannot create a scratch "
            "file in '" +
                (dir.root() / "missing").string() +
                "' for the updates beyond the memory budget of 8 bytes: No such file or "
                "directory");
}

TEST(RobustStrategy, SpilledRoundsAggregateAsInMemoryOnes) {
  testing::TempDir dir;
  const auto rows = random_rows(9, 3000, 8);
  for (const char* name : {"median", "trimmed_mean", "multi_krum", "bulyan"}) {
    std::vector<float> results[2];
    for (std::size_t budget : {kUnlimited, std::size_t{3000 * 4 * 2}}) {
      auto config = config_for(name);
      config.byzantine = 1;
      config.memory_budget_bytes = budget;
      config.scratch_dir = dir.root();
      auto strategy = make_robust_strategy(config, 3000);
      ASSERT_TRUE(strategy);
      const std::vector<float> global(3000, 0.0f);
      (*strategy)->begin_round(global, 1);
      for (const auto& row : rows) {
        (*strategy)->add_update(row, 1);
      }
      ASSERT_EQ((*strategy)->refuse_finish(), std::nullopt) << name;
      results[budget == kUnlimited ? 0 : 1] = (*strategy)->finish_round();
    }
    EXPECT_TRUE(same_bits(results[0], results[1])) << name;
  }
}

}  // namespace
}  // namespace fedcore::federation
