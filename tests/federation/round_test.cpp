#include "server/federation/round.hpp"

#include <limits>

#include <gtest/gtest.h>

#include "shared/util/rng.hpp"

namespace fedcore::federation {
namespace {

constexpr std::size_t kClients = 4;

struct Fixture {
  model::ParamLayout layout;
  std::vector<float> global;
  std::unique_ptr<Strategy> strategy;
  std::map<std::string, std::string> nonces;

  Fixture() {
    layout.append("w", {3});
    global.assign(3, 0.0f);
    strategy = std::move(*make_strategy("fedavg", 3));
    strategy->begin_round(global, 1u << 20);
    for (std::size_t c = 0; c < kClients; ++c) {
      nonces["h" + std::to_string(c)] = std::string(31, '0') + std::to_string(c);
    }
  }

  // Run 1's round `round`, closing with at least min_clients accepted updates.
  static RoundSettings settings(std::size_t min_clients, std::int64_t round = 2) {
    RoundSettings s;
    s.run_id = 1;
    s.round = round;
    s.min_clients = min_clients;
    return s;
  }

  Round make(std::size_t min_clients, std::int64_t round = 2) {
    return Round(settings(min_clients, round), nonces, global, layout, *strategy);
  }

  protocol::UpdateReport report(std::size_t c, std::int64_t round = 2) {
    protocol::UpdateReport r;
    r.run_id = 1;
    r.round = round;
    r.nonce = nonces["h" + std::to_string(c)];
    r.layout_fingerprint = layout.fingerprint_hex();
    r.samples = 10 * (c + 1);
    r.loss = 0.5;
    r.accuracy = 0.8;
    return r;
  }
};

const std::vector<float> kGood{1.0f, 2.0f, 3.0f};

// min_clients in {1, n-1, n} x a short deadline (2 of 4 answered when it passes) and a
// long one (all 4 answered before it).
TEST(Round, QuorumMatrix) {
  struct Case {
    std::size_t min_clients;
    std::size_t answered_before_close;
    bool expect_success;
  };
  const Case cases[] = {
      {1, 2, true},        {kClients - 1, 2, false},       {kClients, 2, false},
      {1, kClients, true}, {kClients - 1, kClients, true}, {kClients, kClients, true}};
  for (const auto& c : cases) {
    Fixture f;
    Round round = f.make(c.min_clients);
    for (std::size_t i = 0; i < c.answered_before_close; ++i) {
      EXPECT_EQ(round.on_update("h" + std::to_string(i), f.report(i), kGood, 12, nullptr),
                UpdateVerdict::accepted);
    }
    EXPECT_EQ(round.all_answered(), c.answered_before_close == kClients);
    const auto closed = round.close();
    EXPECT_EQ(closed.succeeded, c.expect_success)
        << "min " << c.min_clients << ", answered " << c.answered_before_close;
    EXPECT_EQ(closed.accepted, c.answered_before_close);
    EXPECT_EQ(closed.timed_out, kClients - c.answered_before_close);
    if (!c.expect_success) {
      EXPECT_NE(closed.failure_reason.find("no quorum"), std::string::npos);
    }
    for (const auto& o : round.outcomes()) {
      EXPECT_TRUE(o.status == ClientStatus::ok || o.status == ClientStatus::timeout);
    }
  }
}

TEST(Round, NanAndWrongLayoutAreRejectedAndRecordedYetTheRoundCompletes) {
  Fixture f;
  Round round = f.make(2);
  std::string why;
  std::vector<float> nan_update{1.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f};
  EXPECT_EQ(round.on_update("h0", f.report(0), nan_update, 12, &why), UpdateVerdict::rejected);
  EXPECT_NE(why.find("NaN"), std::string::npos);
  auto wrong_layout = f.report(1);
  wrong_layout.layout_fingerprint = "0123456789abcdef";
  EXPECT_EQ(round.on_update("h1", wrong_layout, kGood, 12, &why), UpdateVerdict::rejected);
  EXPECT_NE(why.find("layout"), std::string::npos);
  EXPECT_EQ(round.on_update("h2", f.report(2), kGood, 12, nullptr), UpdateVerdict::accepted);
  EXPECT_EQ(round.on_update("h3", f.report(3), kGood, 12, nullptr), UpdateVerdict::accepted);
  ASSERT_TRUE(round.all_answered());
  const auto closed = round.close();
  EXPECT_TRUE(closed.succeeded);
  EXPECT_EQ(closed.accepted, 2u);
  EXPECT_EQ(closed.rejected, 2u);
  EXPECT_EQ(round.outcomes()[0].status, ClientStatus::rejected);
  EXPECT_NE(round.outcomes()[0].reason.find("NaN"), std::string::npos);
  EXPECT_EQ(round.outcomes()[0].rejection, Rejection::non_finite);
  EXPECT_EQ(f.strategy->updates(), 2u);  // the rejected ones never touched the aggregate
}

// A compressed update reaches the Round as a StepDecoder: FedAvg folds it chunk by chunk
// and ends with the model the decoded vector gives; a step past the round's norm bound is
// taken back and rejected naming the norm, as a plain update would be; a strategy that
// keeps every update (median) gets it decoded whole.
TEST(Round, EncodedUpdatesAreFoldedFromTheirPayloadOrDecodedForStrategiesThatKeepThem) {
  protocol::CompressionTerms f16;
  f16.up = protocol::UpdateEncoding::f16;
  Rng rounding(1);
  const std::vector<float> small_step{0.5f, -0.25f, 1.0f}, big_step{0, 0, 100.0f};
  const auto small = protocol::encode_step(small_step, f16, rounding);
  const auto big = protocol::encode_step(big_step, f16, rounding);
  for (const char* name : {"fedavg", "median"}) {
    Fixture f;
    StrategyConfig config;
    config.name = name;
    f.strategy = std::move(*make_strategy(config, 3));
    f.strategy->begin_round(f.global, 1u << 20);
    auto settings = Fixture::settings(1);
    settings.checks.max_update_norm = 10;
    Round round(settings, f.nonces, f.global, f.layout, *f.strategy);
    auto step = protocol::StepDecoder::open(protocol::UpdateEncoding::f16, small, 3);
    ASSERT_TRUE(step);
    std::string why;
    EXPECT_EQ(round.on_update("h0", f.report(0), {}, 8, &why, nullptr, {}, &*step),
              UpdateVerdict::accepted)
        << name << ": " << why;
    auto too_far = protocol::StepDecoder::open(protocol::UpdateEncoding::f16, big, 3);
    ASSERT_TRUE(too_far);
    EXPECT_EQ(round.on_update("h1", f.report(1), {}, 8, &why, nullptr, {}, &*too_far),
              UpdateVerdict::rejected);
    EXPECT_NE(why.find("norm"), std::string::npos) << name << ": " << why;
    EXPECT_EQ(round.outcomes()[1].rejection, Rejection::norm);
    EXPECT_EQ(f.strategy->updates(), 1u) << name;
    EXPECT_EQ(f.strategy->finish_round(), small_step) << name;  // global is 0: the step
  }
}

TEST(Round, ReplaysWrongNoncesAndDuplicatesAreStaleAndDoNotConsumeTheAnswer) {
  Fixture f;
  Round round = f.make(1);
  std::string why;
  StaleReason reason = StaleReason::no_round;
  // An update from round 1 replayed in round 2.
  EXPECT_EQ(round.on_update("h0", f.report(0, 1), kGood, 12, &why, &reason), UpdateVerdict::stale);
  EXPECT_NE(why.find("replayed"), std::string::npos);
  EXPECT_EQ(reason, StaleReason::replay);
  auto forged = f.report(0);
  forged.nonce = std::string(32, 'f');
  EXPECT_EQ(round.on_update("h0", forged, kGood, 12, &why, &reason), UpdateVerdict::stale);
  EXPECT_NE(why.find("nonce"), std::string::npos);
  EXPECT_EQ(reason, StaleReason::nonce);
  EXPECT_EQ(round.on_update("stranger", f.report(0), kGood, 12, &why, &reason),
            UpdateVerdict::stale);
  EXPECT_NE(why.find("not selected"), std::string::npos);
  EXPECT_EQ(reason, StaleReason::not_selected);
  // The genuine update still counts, once.
  EXPECT_EQ(round.on_update("h0", f.report(0), kGood, 12, nullptr), UpdateVerdict::accepted);
  EXPECT_EQ(round.on_update("h0", f.report(0), kGood, 12, &why, &reason), UpdateVerdict::stale);
  EXPECT_NE(why.find("duplicate"), std::string::npos);
  EXPECT_EQ(reason, StaleReason::duplicate);
  EXPECT_EQ(stale_reason_name(reason), "duplicate");
  EXPECT_EQ(f.strategy->updates(), 1u);
}

TEST(Round, DroppedClientsAnswerWithTheirReason) {
  Fixture f;
  Round round = f.make(3);
  round.on_dropped("h1", "connection lost mid-round");
  for (std::size_t c : {0u, 2u, 3u}) {
    round.on_update("h" + std::to_string(c), f.report(c), kGood, 12, nullptr);
  }
  ASSERT_TRUE(round.all_answered());
  const auto closed = round.close();
  EXPECT_TRUE(closed.succeeded);
  EXPECT_EQ(closed.dropped, 1u);
  EXPECT_EQ(round.outcomes()[1].status, ClientStatus::dropped);
  EXPECT_EQ(round.outcomes()[1].reason, "connection lost mid-round");
}

// A rogue client's sample count is its weight in FedAvg. Claiming 4 billion samples after
// declaring 100 at HELLO gets its update rejected; the average is the honest clients'.
TEST(Round, ARogueClaimAboveItsDeclarationIsRejectedAndCannotDominate) {
  Fixture f;
  auto settings = Fixture::settings(2);
  settings.declared_samples = {{"h0", 50}, {"h1", 150}, {"h2", 100}, {"h3", 40}};
  Round round(settings, f.nonces, f.global, f.layout, *f.strategy);
  auto claim = [&](std::size_t c, std::uint64_t samples) {
    auto r = f.report(c);
    r.samples = samples;
    return r;
  };
  const std::vector<float> ones(3, 1.0f), threes(3, 3.0f), huge(3, 1000.0f);
  EXPECT_EQ(round.on_update("h0", claim(0, 50), ones, 12, nullptr), UpdateVerdict::accepted);
  EXPECT_EQ(round.on_update("h1", claim(1, 150), threes, 12, nullptr), UpdateVerdict::accepted);
  std::string why;
  EXPECT_EQ(round.on_update("h2", claim(2, 4'000'000'000), huge, 12, &why),
            UpdateVerdict::rejected);
  EXPECT_EQ(why, "update claims 4000000000 samples; the client declared 100 at HELLO");
  // Fewer than declared is fine (a site may train on a subset).
  EXPECT_EQ(round.on_update("h3", claim(3, 1), ones, 12, nullptr), UpdateVerdict::accepted);
  ASSERT_TRUE(round.close().succeeded);
  const auto& rogue = round.outcomes()[2];
  EXPECT_EQ(rogue.status, ClientStatus::rejected);
  ASSERT_TRUE(rogue.rejection.has_value());
  EXPECT_EQ(*rogue.rejection, Rejection::samples_above_declared);
  EXPECT_EQ(rejection_name(Rejection::samples_above_declared), "samples_above_declared");
  // (50 * 1 + 150 * 3 + 1 * 1) / 201, exactly as FedAvg over the honest three.
  const auto mean = f.strategy->finish_round();
  for (float v : mean) {
    EXPECT_FLOAT_EQ(v, 501.0f / 201.0f);
  }
}

// A rogue that declares 4 billion samples at HELLO and claims them is within its word, but
// weighs no more than the admin's cap (RunConfig::max_samples_per_client).
TEST(Round, TheAdminsCapBoundsTheWeightOfAConsistentLiar) {
  Fixture f;
  auto settings = Fixture::settings(2);
  settings.declared_samples = {{"h0", 50}, {"h1", 4'000'000'000}};
  settings.max_samples_per_client = 50;
  f.nonces.erase("h2");
  f.nonces.erase("h3");
  Round round(settings, f.nonces, f.global, f.layout, *f.strategy);
  auto claim = [&](std::size_t c, std::uint64_t samples) {
    auto r = f.report(c);
    r.samples = samples;
    return r;
  };
  EXPECT_EQ(round.on_update("h0", claim(0, 50), std::vector<float>(3, 1.0f), 12, nullptr),
            UpdateVerdict::accepted);
  EXPECT_EQ(
      round.on_update("h1", claim(1, 4'000'000'000), std::vector<float>(3, 100.0f), 12, nullptr),
      UpdateVerdict::accepted);
  ASSERT_TRUE(round.close().succeeded);
  EXPECT_EQ(round.outcomes()[1].samples, 4'000'000'000u);  // what it claimed, on record
  // Equal weights: (1 + 100) / 2. Uncapped, the mean would be 99.99999...
  const auto mean = f.strategy->finish_round();
  for (float v : mean) {
    EXPECT_FLOAT_EQ(v, 50.5f);
  }
}

// Without a cap or declarations a Round behaves as before: the claim is the weight.
TEST(Round, WithoutBoundsTheClaimIsTheWeight) {
  Fixture f;
  f.nonces.erase("h2");
  f.nonces.erase("h3");
  Round round = f.make(2);
  auto r0 = f.report(0);
  r0.samples = 1;
  auto r1 = f.report(1);
  r1.samples = 3;
  EXPECT_EQ(round.on_update("h0", r0, std::vector<float>(3, 0.0f), 12, nullptr),
            UpdateVerdict::accepted);
  EXPECT_EQ(round.on_update("h1", r1, std::vector<float>(3, 4.0f), 12, nullptr),
            UpdateVerdict::accepted);
  ASSERT_TRUE(round.close().succeeded);
  for (float v : f.strategy->finish_round()) {
    EXPECT_FLOAT_EQ(v, 3.0f);
  }
}

// Weighted client sampling: an update weighs how many times the round drew its client, not
// its samples.
TEST(Round, DrawnWeightsReplaceTheSampleCounts) {
  Fixture f;
  auto settings = Fixture::settings(2);
  settings.weights = {{"h0", 3}, {"h1", 1}};
  f.nonces.erase("h2");
  f.nonces.erase("h3");
  Round round(settings, f.nonces, f.global, f.layout, *f.strategy);
  auto r0 = f.report(0);
  r0.samples = 1;
  auto r1 = f.report(1);
  r1.samples = 1000;
  EXPECT_EQ(round.on_update("h0", r0, std::vector<float>(3, 4.0f), 12, nullptr),
            UpdateVerdict::accepted);
  EXPECT_EQ(round.on_update("h1", r1, std::vector<float>(3, 0.0f), 12, nullptr),
            UpdateVerdict::accepted);
  ASSERT_TRUE(round.close().succeeded);
  EXPECT_EQ(round.outcomes()[1].samples, 1000u);  // on record, but not its weight
  // (3 x 4 + 1 x 0) / 4; weighted by samples it would be 4 / 1001.
  for (float v : f.strategy->finish_round()) {
    EXPECT_FLOAT_EQ(v, 3.0f);
  }
}

// Weighted client sampling with a robust aggregator: each drawn site's update counts once,
// whatever its draws (the robust rules are unweighted; the draws weigh only in the mean).
// Three sites drawn 3, 1 and 1 times send 4, 0 and 1: the coordinate-wise median is 1, where
// a median that repeated the first site's update for its draws would give 4.
TEST(Round, WeightedDrawsDoNotRepeatAnUpdateInARobustAggregator) {
  Fixture f;
  StrategyConfig median;
  median.name = "median";
  f.strategy = std::move(*make_strategy(median, 3));
  f.strategy->begin_round(f.global, 1u << 20);
  auto settings = Fixture::settings(3);
  settings.weights = {{"h0", 3}, {"h1", 1}, {"h2", 1}};
  f.nonces.erase("h3");
  Round round(settings, f.nonces, f.global, f.layout, *f.strategy);
  const float sent[] = {4.0f, 0.0f, 1.0f};
  for (std::size_t c = 0; c < 3; ++c) {
    EXPECT_EQ(round.on_update("h" + std::to_string(c), f.report(c), std::vector<float>(3, sent[c]),
                              12, nullptr),
              UpdateVerdict::accepted);
  }
  ASSERT_TRUE(round.close().succeeded);
  EXPECT_EQ(f.strategy->finish_round(), std::vector<float>(3, 1.0f));
}

}  // namespace
}  // namespace fedcore::federation
