// Whole SecAgg+ rounds in process: the aggregate against plain weighted FedAvg, dropouts
// at every stage, the threshold, and the client's refusals of a misbehaving server.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include <gtest/gtest.h>

#include "shared/secagg/client.hpp"
#include "shared/secagg/server.hpp"

namespace fedcore::secagg {
namespace {

enum class DropAt {
  never,
  before_advertise,
  before_sharing,
  before_masking,
  before_signing,
  before_unmask
};

struct Site {
  std::string id;
  std::vector<float> delta;
  double weight = 1.0;
  DropAt drop = DropAt::never;
  std::optional<SecAggClient> client;
};

// Runs one round; returns the server's result or its error.
class RoundHarness {
 public:
  RoundHarness(std::uint32_t n, std::size_t d, SecAggSettings settings = {}, std::uint64_t seed = 1)
      : rng_(seed), d_(d) {
    for (std::uint32_t i = 0; i < n; ++i) {
      Site site;
      site.id = "site-" + std::to_string(100 + i);
      site.delta.resize(d);
      for (auto& v : site.delta) {
        v = static_cast<float>(rng_.normal() * 0.5);
      }
      site.weight = 0.2 + 0.8 * rng_.uniform_double();
      site.client.emplace(SecAggClient::start({1, 7, site.id, nullptr, nullptr}).value());
      sites_.push_back(std::move(site));
      ids_.push_back(sites_.back().id);
    }
    plan_ = plan_round(n, settings).value();
  }

  std::vector<Site>& sites() { return sites_; }
  const std::vector<std::string>& ids() const { return ids_; }
  const RoundPlan& plan() const { return plan_; }
  void set_min_survivors(std::uint32_t n) { plan_.min_survivors = n; }

  // The plain weighted mean of the sites that survive to the masked input.
  std::vector<float> plain_mean() const {
    std::vector<double> sum(d_, 0.0);
    double weights = 0;
    for (const auto& s : sites_) {
      if (s.drop == DropAt::never || s.drop >= DropAt::before_signing) {
        for (std::size_t i = 0; i < d_; ++i) {
          sum[i] += s.weight * std::clamp(double(s.delta[i]), -plan_.clip_range / s.weight,
                                          plan_.clip_range / s.weight);
        }
        weights += s.weight;
      }
    }
    std::vector<float> mean(d_);
    for (std::size_t i = 0; i < d_; ++i) {
      mean[i] = static_cast<float>(sum[i] / weights);
    }
    return mean;
  }

  result<SecAggResult> run() {
    SecAggServer server(1, 7, plan_, ids_, d_);
    server_ = &server;
    auto alive = [&](const Site& s, DropAt stage) {
      return s.drop == DropAt::never || s.drop > stage;
    };
    for (auto& s : sites_) {
      if (alive(s, DropAt::before_advertise)) {
        if (auto ok = server.on_advertise(s.id, s.client->advertise()); !ok) {
          return ok.error();
        }
      }
    }
    auto keys = server.close_advertising(rng_);
    if (!keys) {
      return keys.error();
    }
    for (auto& s : sites_) {
      if (alive(s, DropAt::before_sharing) && keys->count(s.id)) {
        auto upload = s.client->share_keys(keys->at(s.id));
        if (!upload) {
          return upload.error();
        }
        if (auto ok = server.on_shares(s.id, *upload); !ok) {
          return ok.error();
        }
      }
    }
    auto relayed = server.close_sharing();
    if (!relayed) {
      return relayed.error();
    }
    Rng rounding(99);
    for (auto& s : sites_) {
      if (alive(s, DropAt::before_masking) && relayed->count(s.id)) {
        auto masked = s.client->masked_input(relayed->at(s.id), s.delta, s.weight, rounding);
        if (!masked) {
          return masked.error();
        }
        if (auto ok = server.on_masked(s.id, *masked); !ok) {
          return ok.error();
        }
      }
    }
    auto list = server.close_masking();
    if (!list) {
      return list.error();
    }
    for (auto& s : sites_) {
      if (alive(s, DropAt::before_signing) &&
          std::count(list->survivors.begin(), list->survivors.end(), s.id)) {
        auto signature = s.client->sign_survivors(*list);
        if (!signature) {
          return signature.error();
        }
        if (auto ok = server.on_signature(s.id, *signature); !ok) {
          return ok.error();
        }
      }
    }
    auto requests = server.close_consistency();
    if (!requests) {
      return requests.error();
    }
    last_request_ = requests->begin()->second;
    for (auto& s : sites_) {
      if (alive(s, DropAt::before_unmask) && requests->count(s.id)) {
        auto response = s.client->unmask(requests->at(s.id));
        if (!response) {
          return response.error();
        }
        if (auto ok = server.on_unmask(s.id, *response); !ok) {
          return ok.error();
        }
      }
    }
    auto out = server.finish();
    stages_ = {server.advertised().size(), server.shared().size(), server.masked().size(),
               server.signed_survivors().size(), server.unmasked().size()};
    return out;
  }

  std::vector<std::size_t> stages_;
  UnmaskRequest last_request_;

 private:
  Rng rng_;
  std::size_t d_;
  RoundPlan plan_;
  std::vector<Site> sites_;
  std::vector<std::string> ids_;
  SecAggServer* server_ = nullptr;
};

// |secure - plain| per coordinate: each of the n survivors' encodings is off by at most
// one step in each of the numerator's coordinates and in the weight; the division by the
// summed weight W turns that into step * n * (1 + |mean|) / W.
void expect_close_to_plain(const SecAggResult& got, const std::vector<float>& plain,
                           const RoundPlan& plan, std::size_t survivors) {
  ASSERT_EQ(got.mean_delta.size(), plain.size());
  const double step = quantization_step(plan);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    const double bound =
        step * double(survivors) * (1.0 + std::abs(plain[i])) / got.total_weight + 1e-6;
    ASSERT_NEAR(got.mean_delta[i], plain[i], bound) << "coordinate " << i;
  }
}

TEST(SecAggRound, EqualsWeightedFedAvgWithinTheQuantizationBound) {
  RoundHarness round(10, 1000);
  auto got = round.run();
  ASSERT_TRUE(got) << got.error().message;
  expect_close_to_plain(*got, round.plain_mean(), round.plan(), 10);
  EXPECT_EQ(got->contributors.size(), 10u);
  // The bound is tight enough to matter: 2^22 levels over [-8, 8] -> error below 1e-4.
  EXPECT_LT(quantization_step(round.plan()) * 10 / got->total_weight, 1e-4);
}

TEST(SecAggRound, SparseGraphWithManyClients) {
  RoundHarness round(40, 300);
  EXPECT_LT(round.plan().degree, 39u);  // k = 16: not all-to-all
  auto got = round.run();
  ASSERT_TRUE(got) << got.error().message;
  expect_close_to_plain(*got, round.plain_mean(), round.plan(), 40);
}

TEST(SecAggRound, SurvivesDropoutsAtEveryStage) {
  RoundHarness round(16, 200);  // k = 12, t = 7
  auto& s = round.sites();
  s[0].drop = DropAt::before_advertise;
  s[1].drop = DropAt::before_sharing;
  s[2].drop = DropAt::before_masking;  // its pairwise masks must be rebuilt
  s[3].drop = DropAt::before_masking;
  s[4].drop = DropAt::before_signing;  // contributes, but does not help unmask
  s[5].drop = DropAt::before_unmask;   // contributes and signs, but does not help unmask
  auto got = round.run();
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(round.stages_, (std::vector<std::size_t>{15, 14, 12, 11, 10}));
  EXPECT_EQ(round.last_request_.dropped.size(), 2u);
  expect_close_to_plain(*got, round.plain_mean(), round.plan(), 12);
  EXPECT_EQ(got->contributors.size(), 12u);
}

TEST(SecAggRound, BelowTheThresholdTheRoundFailsVisibly) {
  // 10 clients, t = 5: six drop before sending a masked input.
  RoundHarness round(10, 50);
  for (int i = 0; i < 6; ++i) {
    round.sites()[static_cast<std::size_t>(i)].drop = DropAt::before_masking;
  }
  auto got = round.run();
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, errc::failed_precondition);
  EXPECT_NE(got.error().message.find("fewer than the threshold 5"), std::string::npos)
      << got.error().message;
}

TEST(SecAggRound, BelowTheSurvivorsTheNoiseWasSizedForTheRoundFails) {
  // 10 clients, t = 5, but distributed DP sized its noise for 8: 7 masked inputs are not
  // enough, although they are above the threshold.
  RoundHarness round(10, 50);
  round.set_min_survivors(8);
  for (int i = 0; i < 3; ++i) {
    round.sites()[static_cast<std::size_t>(i)].drop = DropAt::before_masking;
  }
  auto got = round.run();
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, errc::failed_precondition);
  EXPECT_NE(got.error().message.find("fewer than the survivors its noise was sized for 8"),
            std::string::npos)
      << got.error().message;
  EXPECT_EQ(required_survivors(round.plan()), 8u);
}

TEST(SecAggRound, TooFewUnmaskersCannotRemoveTheMasks) {
  // 10 clients, t = 5; 6 survivors but only 4 answer the unmask request: no survivor's
  // self mask can be rebuilt, and the server learns nothing.
  RoundHarness round(10, 50);
  for (int i = 0; i < 6; ++i) {
    round.sites()[static_cast<std::size_t>(i)].drop =
        i < 4 ? DropAt::before_masking : DropAt::before_unmask;
  }
  auto got = round.run();
  ASSERT_FALSE(got);
  EXPECT_NE(got.error().message.find("cannot rebuild"), std::string::npos) << got.error().message;
}

TEST(SecAggClientRefusals, NeverRevealsBothSecretsOfOneNeighbour) {
  RoundHarness round(5, 10);
  // Drive a normal round up to the unmask request, then ask one client for both kinds.
  auto& sites = round.sites();
  const auto ids = round.ids();
  SecAggServer real(1, 7, round.plan(), ids, 10);
  for (auto& s : sites) {
    ASSERT_TRUE(real.on_advertise(s.id, s.client->advertise()));
  }
  Rng rng(4);
  auto keys = real.close_advertising(rng).value();
  for (auto& s : sites) {
    ASSERT_TRUE(real.on_shares(s.id, s.client->share_keys(keys.at(s.id)).value()));
  }
  auto relayed = real.close_sharing().value();
  Rng rounding(1);
  for (auto& s : sites) {
    ASSERT_TRUE(real.on_masked(
        s.id, s.client->masked_input(relayed.at(s.id), s.delta, 1.0, rounding).value()));
  }
  const SurvivorList all = real.close_masking().value();
  // Unmasking before signing a survivor list is out of order.
  EXPECT_EQ(sites[0].client->unmask({all.survivors, {}, {}}).error().code,
            errc::failed_precondition);
  // Too few survivors, or a list without us: nothing is signed, so nothing is revealed.
  const SurvivorList few{{sites[0].id, sites[2].id}};
  EXPECT_EQ(sites[2].client->sign_survivors(few).error().code, errc::failed_precondition);
  const SurvivorList without_us{{sites[0].id, sites[1].id, sites[2].id}};
  EXPECT_EQ(sites[4].client->sign_survivors(without_us).error().code, errc::failed_precondition);
  for (auto& s : sites) {
    ASSERT_TRUE(s.client->sign_survivors(all)) << s.id;
  }
  UnmaskRequest greedy{all.survivors, {sites[1].id}, {}};  // "site-101 survived and dropped"
  auto refused = sites[0].client->unmask(greedy);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::permission_denied);
  // A request naming other survivors than the list the client signed: refused.
  UnmaskRequest other{{sites[0].id, sites[1].id, sites[2].id, sites[3].id}, {sites[4].id}, {}};
  auto switched = sites[1].client->unmask(other);
  ASSERT_FALSE(switched);
  EXPECT_EQ(switched.error().code, errc::permission_denied);
  EXPECT_NE(switched.error().message.find("other survivors"), std::string::npos);
  // Out of order: a client that already unmasked refuses a second request.
  UnmaskRequest honest{all.survivors, {}, {}};
  ASSERT_TRUE(sites[3].client->unmask(honest));
  EXPECT_EQ(sites[3].client->unmask(honest).error().code, errc::failed_precondition);
}

TEST(SecAggClientRefusals, RefusesMinorityThresholdsAndTamperedShares) {
  RoundHarness round(5, 10);
  auto& sites = round.sites();
  const auto ids = round.ids();
  SecAggServer server(1, 7, round.plan(), ids, 10);
  for (auto& s : sites) {
    ASSERT_TRUE(server.on_advertise(s.id, s.client->advertise()));
  }
  Rng rng(4);
  auto keys = server.close_advertising(rng).value();
  // A server asking for a threshold of 2 of 4 (not a majority) is refused.
  auto weak = keys.at(sites[0].id);
  weak.plan.threshold = 2;
  EXPECT_EQ(sites[0].client->share_keys(weak).error().code, errc::invalid_argument);
  // A share tampered with in transit is refused, not silently skipped.
  for (std::size_t i = 1; i < sites.size(); ++i) {
    ASSERT_TRUE(
        server.on_shares(sites[i].id, sites[i].client->share_keys(keys.at(sites[i].id)).value()));
  }
  auto relayed = server.close_sharing().value();
  auto tampered = relayed.at(sites[1].id);
  tampered.shares[0].sealed.back() ^= 1;
  Rng rounding(1);
  // sites[0] never shared, so it cannot mask; sites[1] gets a tampered share.
  auto masked = sites[1].client->masked_input(tampered, sites[1].delta, 1.0, rounding);
  ASSERT_FALSE(masked);
  EXPECT_EQ(masked.error().code, errc::data_loss);
}

TEST(SecAggServerChecks, RefusesOutOfStageDuplicateAndMalformedInputs) {
  RoundHarness round(4, 10);
  auto& sites = round.sites();
  const auto ids = round.ids();
  SecAggServer server(1, 7, round.plan(), ids, 10);
  auto keys = sites[0].client->advertise();
  EXPECT_EQ(server.on_advertise("site-999", keys).error().code, errc::failed_precondition);
  EXPECT_EQ(server.on_advertise(sites[1].id, keys).error().code, errc::invalid_argument);
  ASSERT_TRUE(server.on_advertise(sites[0].id, keys));
  EXPECT_EQ(server.on_advertise(sites[0].id, keys).error().code, errc::invalid_argument);
  EXPECT_EQ(server.on_masked(sites[0].id, std::vector<std::uint32_t>(11)).error().code,
            errc::failed_precondition);
  EXPECT_EQ(server.on_signature(sites[0].id, {}).error().code, errc::failed_precondition);
}

}  // namespace
}  // namespace fedcore::secagg
