// The sampling assumption: which runs the accountant may amplify, and which it refuses.
#include "shared/privacy/sampling.hpp"

#include <gtest/gtest.h>

namespace fedcore::privacy {
namespace {

RunSampling secret(Selection selection) {
  RunSampling run;
  run.selection = selection;
  run.population = 100;
  run.per_round = 10;
  run.probability = 0.1;
  run.selection_secret = true;
  return run;
}

TEST(Sampling, MatchingSelectionsMapToTheirAssumption) {
  EXPECT_EQ(*accountant_sampling(secret(Selection::poisson)), Sampling::poisson);
  EXPECT_EQ(*accountant_sampling(secret(Selection::uniform_fixed_size)), Sampling::fixed_size);
  EXPECT_EQ(*accountant_sampling(secret(Selection::everyone)), Sampling::full);
  EXPECT_EQ(*accountant_sampling(secret(Selection::schedule)), Sampling::full);
}

TEST(Sampling, PredictableSelectionGetsNoAmplification) {
  auto run = secret(Selection::uniform_fixed_size);
  run.selection_secret = false;  // e.g. shuffled by an Rng seeded with the run's seed
  EXPECT_EQ(*accountant_sampling(run), Sampling::full);
  run = secret(Selection::poisson);
  run.selection_secret = false;
  EXPECT_EQ(*accountant_sampling(run), Sampling::full);
}

TEST(Sampling, TakingEveryoneIsFull) {
  auto run = secret(Selection::uniform_fixed_size);
  run.per_round = run.population;
  EXPECT_EQ(*accountant_sampling(run), Sampling::full);
  run = secret(Selection::poisson);
  run.probability = 1.0;
  EXPECT_EQ(*accountant_sampling(run), Sampling::full);
}

TEST(Sampling, WeightedAndOverSelectionAreRefused) {
  auto weighted = accountant_sampling(secret(Selection::weighted));
  ASSERT_FALSE(weighted);
  EXPECT_EQ(weighted.error().code, errc::failed_precondition);
  EXPECT_EQ(weighted.error().message.rfind("weighted:", 0), 0u);
  auto over = accountant_sampling(secret(Selection::first_responders));
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, errc::failed_precondition);
  EXPECT_EQ(over.error().message.rfind("first_responders:", 0), 0u);
}

TEST(Sampling, BadParametersAreInvalid) {
  auto run = secret(Selection::poisson);
  run.probability = 0.0;
  EXPECT_EQ(accountant_sampling(run).error().code, errc::invalid_argument);
  run.probability = 1.5;
  EXPECT_EQ(accountant_sampling(run).error().code, errc::invalid_argument);
  run = secret(Selection::uniform_fixed_size);
  run.per_round = 101;
  EXPECT_EQ(accountant_sampling(run).error().code, errc::invalid_argument);
  run.per_round = 0;
  EXPECT_EQ(accountant_sampling(run).error().code, errc::invalid_argument);
}

TEST(Sampling, Names) {
  EXPECT_EQ(sampling_name(Sampling::poisson), "poisson");
  EXPECT_EQ(sampling_name(Sampling::fixed_size), "fixed_size");
  EXPECT_EQ(sampling_name(Sampling::full), "full");
}

}  // namespace
}  // namespace fedcore::privacy
