// The SecAgg+ building blocks against what they must do.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include <gtest/gtest.h>

#include "shared/secagg/crypto.hpp"
#include "shared/secagg/graph.hpp"
#include "shared/secagg/plan.hpp"
#include "shared/secagg/quantize.hpp"
#include "shared/secagg/shamir.hpp"

namespace fedcore::secagg {
namespace {

TEST(SecAggCrypto, BothSidesOfAPairDeriveTheSameSeedAndOthersDoNot) {
  auto a = AgreementKey::generate().value();
  auto b = AgreementKey::generate().value();
  auto c = AgreementKey::generate().value();
  const auto ab = a.agree(b.public_key(), "label").value();
  EXPECT_EQ(ab, b.agree(a.public_key(), "label").value());
  EXPECT_NE(ab, a.agree(c.public_key(), "label").value());
  EXPECT_NE(ab, a.agree(b.public_key(), "another label").value());
  // A key rebuilt from its private bytes agrees like the original.
  auto a2 = AgreementKey::from_private(a.private_key()).value();
  EXPECT_EQ(a2.public_key(), a.public_key());
  EXPECT_EQ(a2.agree(b.public_key(), "label").value(), ab);
}

TEST(SecAggCrypto, MalformedPeerKeysAreRefused) {
  auto a = AgreementKey::generate().value();
  EXPECT_EQ(a.agree(Bytes(31, 1), "x").error().code, errc::invalid_argument);
  // The all-zero point has small order: its shared secret is zero, which OpenSSL refuses.
  EXPECT_EQ(a.agree(Bytes(32, 0), "x").error().code, errc::invalid_argument);
  EXPECT_EQ(AgreementKey::from_private(Bytes(16, 1)).error().code, errc::invalid_argument);
}

TEST(SecAggCrypto, SealedSharesOpenOnlyWithTheirKeyAndLabel) {
  const Seed key = random_seed();
  const Bytes message{1, 2, 3, 4, 5};
  auto sealed = seal(key, message, "a->b");
  EXPECT_EQ(sealed.size(), message.size() + kSealOverhead);
  EXPECT_EQ(open(key, sealed, "a->b").value(), message);
  EXPECT_EQ(open(key, sealed, "c->b").error().code, errc::data_loss);
  Seed other = key;
  other[0] ^= 1;
  EXPECT_EQ(open(other, sealed, "a->b").error().code, errc::data_loss);
  sealed[kSealOverhead / 2] ^= 0x40;  // flip a bit of the ciphertext
  EXPECT_EQ(open(key, sealed, "a->b").error().code, errc::data_loss);
  EXPECT_EQ(open(key, Bytes(5), "a->b").error().code, errc::data_loss);
}

TEST(SecAggCrypto, MasksCancelAndLookUniform) {
  const Seed seed = random_seed();
  std::vector<std::uint32_t> v(10007);  // not a multiple of the stream block
  std::iota(v.begin(), v.end(), 0u);
  const auto original = v;
  add_mask(v, seed, MaskSign::add);
  EXPECT_NE(v, original);
  // The mask is AES-CTR keystream: its words' mean is near 2^31 (a loose check that it
  // is not zeros or a short cycle).
  std::vector<std::uint32_t> mask(100000, 0);
  add_mask(mask, seed, MaskSign::add);
  const double mean = std::accumulate(mask.begin(), mask.end(), 0.0,
                                      [](double s, std::uint32_t w) { return s + w; }) /
                      double(mask.size());
  EXPECT_NEAR(mean / 4294967296.0, 0.5, 0.01);
  // 100,000 random 32-bit words collide about once (birthday bound n^2 / 2^33 = 1.2).
  EXPECT_GE(std::set<std::uint32_t>(mask.begin(), mask.end()).size(), mask.size() - 10);
  // The same seed expands to the same stream: the block boundary is invisible.
  std::vector<std::uint32_t> prefix(10007, 0);
  add_mask(prefix, seed, MaskSign::add);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), mask.begin()));
  add_mask(v, seed, MaskSign::subtract);
  EXPECT_EQ(v, original);
  // Several masks in one pass equal the masks one by one.
  const Seed a = random_seed(), b = random_seed();
  auto one_by_one = original;
  add_mask(one_by_one, a, MaskSign::add);
  add_mask(one_by_one, b, MaskSign::subtract);
  auto together = original;
  const std::vector<MaskStream> both{{a, MaskSign::add}, {b, MaskSign::subtract}};
  add_masks(together, both);
  EXPECT_EQ(together, one_by_one);
}

TEST(SecAggShamir, AnyThresholdSharesRecoverTheSecretAndFewerDoNot) {
  const Bytes secret = random_bytes(32);
  auto shares = shamir_split(secret, 4, 7).value();
  ASSERT_EQ(shares.size(), 7u);
  // Every 4-subset recovers it.
  for (int mask = 0; mask < 128; ++mask) {
    if (__builtin_popcount(mask) != 4) {
      continue;
    }
    std::vector<Share> subset;
    for (int i = 0; i < 7; ++i) {
      if (mask & (1 << i)) {
        subset.push_back(shares[static_cast<std::size_t>(i)]);
      }
    }
    EXPECT_EQ(shamir_combine(subset, 4, 32).value(), secret) << "subset " << mask;
  }
  const std::vector<Share> three(shares.begin(), shares.begin() + 3);
  EXPECT_EQ(shamir_combine(three, 4, 32).error().code, errc::failed_precondition);
  // Duplicates do not count twice.
  std::vector<Share> duplicated{shares[0], shares[0], shares[1], shares[2]};
  EXPECT_EQ(shamir_combine(duplicated, 4, 32).error().code, errc::failed_precondition);
}

TEST(SecAggShamir, ThresholdMinusOneSharesAreConsistentWithEverySecret) {
  const Bytes secret = random_bytes(32);
  auto shares = shamir_split(secret, 4, 7).value();
  const std::vector<Share> three(shares.begin(), shares.begin() + 3);
  // For any candidate secret there is a fourth share completing the three into it: the
  // three shares rule nothing out.
  for (int trial = 0; trial < 5; ++trial) {
    const Bytes candidate = random_bytes(32);
    auto completing = share_consistent_with(three, candidate, 7).value();
    std::vector<Share> four = three;
    four.push_back(completing);
    EXPECT_EQ(shamir_combine(four, 4, 32).value(), candidate);
  }
}

TEST(SecAggShamir, BadParametersAndSharesAreRefused) {
  EXPECT_EQ(shamir_split(Bytes(32), 0, 3).error().code, errc::invalid_argument);
  EXPECT_EQ(shamir_split(Bytes(32), 4, 3).error().code, errc::invalid_argument);
  EXPECT_EQ(shamir_split(Bytes(65), 2, 3).error().code, errc::invalid_argument);
  auto shares = shamir_split(Bytes(32, 7), 2, 3).value();
  shares[0].x = 0;
  EXPECT_EQ(shamir_combine(shares, 2, 32).error().code, errc::invalid_argument);
  shares[0].x = 1;
  shares[0].y.assign(kShareValueSize, 0xff);  // above the prime
  EXPECT_EQ(shamir_combine(shares, 2, 32).error().code, errc::invalid_argument);
}

TEST(SecAggGraph, HararyGraphsAreRegularSymmetricAndShuffled) {
  Rng rng(5);
  for (std::uint32_t n : {5u, 10u, 33u, 100u}) {
    for (std::uint32_t k : {2u, 4u, n - 1}) {
      if (k >= n || (k % 2 != 0 && k != n - 1)) {
        continue;
      }
      const auto g = harary_graph(n, k, rng);
      for (std::uint32_t i = 0; i < n; ++i) {
        ASSERT_EQ(g[i].size(), k) << "n " << n << " k " << k;
        EXPECT_EQ(std::count(g[i].begin(), g[i].end(), i), 0);
        EXPECT_EQ(std::set<std::uint32_t>(g[i].begin(), g[i].end()).size(), k);
        for (auto j : g[i]) {
          EXPECT_TRUE(std::binary_search(g[j].begin(), g[j].end(), i));
        }
      }
    }
  }
  // Two seeds lay the ring out differently.
  Rng a(1), b(2);
  EXPECT_NE(harary_graph(50, 6, a), harary_graph(50, 6, b));
}

TEST(SecAggPlan, DefaultsAreLogarithmicMajoritiesAndTheRingCannotWrap) {
  auto small = plan_round(10, {}).value();
  EXPECT_EQ(small.degree, 9u);  // 3 log2 10 = 10 > 9: complete
  EXPECT_EQ(small.threshold, 5u);
  auto large = plan_round(1000, {}).value();
  EXPECT_EQ(large.degree, 30u);
  EXPECT_EQ(large.threshold, 16u);
  EXPECT_LT(std::uint64_t{1000} * large.quant_range, std::uint64_t{1} << 32);
  EXPECT_EQ(plan_round(100, {}).value().quant_range, 1u << 22);
  EXPECT_EQ(plan_round(2, {}).error().code, errc::invalid_argument);
  EXPECT_EQ(plan_round(10, {.degree = 4, .threshold = 2}).error().code, errc::invalid_argument);
  EXPECT_EQ(plan_round(10, {.degree = 5}).error().code, errc::invalid_argument);
  EXPECT_EQ(plan_round(10, {.clip_range = 0}).error().code, errc::invalid_argument);
}

TEST(SecAggQuantize, EncodingIsUnbiasedAndWithinOneStep) {
  const auto plan = plan_round(3, {.clip_range = 1.0, .quant_range = 1000}).value();
  Rng rng(3);
  const std::vector<float> delta{0.3337f, -0.5f, 2.0f, -7.0f};  // the last two clip
  std::vector<std::uint32_t> sum(5, 0), one(5);
  constexpr int kTrials = 2000;
  std::vector<double> mean(4, 0.0);
  for (int t = 0; t < kTrials; ++t) {
    encode_weighted(delta, 1.0, plan, rng, one);
    std::vector<float> decoded(4);
    decode_weighted_mean(one, 1, plan, decoded);
    for (std::size_t i = 0; i < 4; ++i) {
      const double expected = std::clamp(double(delta[i]), -1.0, 1.0);
      EXPECT_LE(std::abs(decoded[i] - expected), quantization_step(plan) * 1.0001);
      mean[i] += decoded[i] / kTrials;
    }
  }
  // Stochastic rounding is unbiased: the mean of 2000 encodings is within 5 standard
  // errors (step / (2 sqrt(n))) of the value.
  EXPECT_NEAR(mean[0], 0.3337, 5 * quantization_step(plan) / (2 * std::sqrt(2000.0)));
  EXPECT_NEAR(mean[2], 1.0, 1e-6);  // clipped: exact per draw, float sums
  EXPECT_NEAR(mean[3], -1.0, 1e-6);
}

}  // namespace
}  // namespace fedcore::secagg
