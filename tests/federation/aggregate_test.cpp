#include "server/federation/aggregate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "server/federation/fixed_point_mean.hpp"
#include "shared/protocol/update_encoding.hpp"
#include "shared/util/rng.hpp"
#include "shared/util/worker_pool.hpp"

namespace fedcore::federation {
namespace {

model::ParamLayout small_layout() {
  model::ParamLayout layout;
  layout.append("fc.weight", {3, 2});
  layout.append("fc.bias", {2});
  return layout;
}

TEST(FedAvg, EqualsTheSampleWeightedMeanTo1e6) {
  Rng rng(1);
  const std::size_t n = 10000;
  const std::vector<double> weights{1204, 37, 999, 5, 12000};
  std::vector<std::vector<float>> updates(weights.size(), std::vector<float>(n));
  for (auto& u : updates) {
    for (auto& v : u) {
      v = static_cast<float>(rng.normal());
    }
  }
  auto strategy = make_strategy("fedavg", n);
  ASSERT_TRUE(strategy);
  std::vector<float> global(n, 0.0f);
  (*strategy)->begin_round(global, 20000);
  for (std::size_t c = 0; c < updates.size(); ++c) {
    (*strategy)->add_update(updates[c], static_cast<std::uint64_t>(weights[c]));
  }
  EXPECT_EQ((*strategy)->updates(), weights.size());
  const auto next = (*strategy)->finish_round();
  ASSERT_EQ(next.size(), n);
  double total = 0;
  for (double w : weights) {
    total += w;
  }
  double max_error = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double expected = 0;
    for (std::size_t c = 0; c < updates.size(); ++c) {
      expected += weights[c] * updates[c][i];
    }
    expected /= total;
    max_error = std::max(max_error, std::abs(expected - next[i]));
  }
  EXPECT_LE(max_error, 1e-6);
}

// Five updates of values with very different magnitudes around a non-zero global model, in
// all 120 orders: the fixed-point mean is the same bits every time. The same data through a
// float running mean (the aggregation this replaced) differs between orders, so the data
// does exercise rounding.
TEST(FixedPointMean, EveryArrivalOrderGivesTheSameBits) {
  Rng rng(7);
  const std::size_t n = 4096;
  std::vector<float> global(n);
  for (auto& g : global) {
    g = static_cast<float>(rng.normal() * 3.0);
  }
  const std::vector<std::uint64_t> weights{1, 60000, 7, 333, 12};
  std::vector<std::vector<float>> updates(weights.size(), global);
  for (std::size_t c = 0; c < updates.size(); ++c) {
    const double scale = std::pow(10.0, -double(c));  // steps from 1 down to 1e-4
    for (auto& v : updates[c]) {
      v += static_cast<float>(rng.normal() * scale);
    }
  }
  std::vector<std::size_t> order{0, 1, 2, 3, 4};
  std::vector<float> first;
  std::vector<float> first_float;
  bool float_order_mattered = false;
  int orders = 0;
  do {
    FixedPointMean mean(n);
    mean.begin(global, 60353);
    for (std::size_t c : order) {
      mean.add(updates[c], weights[c]);
    }
    const auto result = mean.mean();
    // The aggregation this replaced: m += (w / W) (x - m) in float.
    std::vector<float> running(n);
    double total = 0;
    for (std::size_t c : order) {
      total += double(weights[c]);
      const auto share = static_cast<float>(double(weights[c]) / total);
      for (std::size_t i = 0; i < n; ++i) {
        running[i] = total == double(weights[c])
                         ? updates[c][i]
                         : running[i] + share * (updates[c][i] - running[i]);
      }
    }
    if (first.empty()) {
      first = result;
      first_float = running;
    } else {
      ASSERT_EQ(result, first) << "order " << orders;
      float_order_mattered = float_order_mattered || running != first_float;
    }
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 120);
  EXPECT_TRUE(float_order_mattered);
}

TEST(FixedPointMean, StaysWithinItsStatedErrorAtTheCoarsestGridsItPlans) {
  // F shrinks as the promised weight grows: 46 - ceil(log2 W_max), at most 40.
  EXPECT_EQ(FixedPointMean::fraction_bits_for(1), 40);
  EXPECT_EQ(FixedPointMean::fraction_bits_for(64), 40);
  EXPECT_EQ(FixedPointMean::fraction_bits_for(65), 39);
  EXPECT_EQ(FixedPointMean::fraction_bits_for(60000), 30);
  EXPECT_EQ(FixedPointMean::fraction_bits_for(std::uint64_t{1} << 46), 0);
  Rng rng(3);
  for (const std::uint64_t promised :
       {std::uint64_t{100}, std::uint64_t{1} << 30, std::uint64_t{1} << 40}) {
    const std::size_t n = 1000;
    std::vector<float> global(n, 0.5f);
    FixedPointMean mean(n);
    mean.begin(global, promised);
    std::vector<std::vector<float>> updates(10, global);
    double total = 0;
    std::vector<double> exact(n, 0.0);
    for (std::size_t c = 0; c < updates.size(); ++c) {
      for (std::size_t i = 0; i < n; ++i) {
        updates[c][i] += static_cast<float>(rng.normal() * 0.01);
        exact[i] += 3.0 * (double(updates[c][i]) - 0.5);
      }
      mean.add(updates[c], 3);
      total += 3;
    }
    const auto result = mean.mean();
    // n terms, each truncated by less than one grid step, over the total weight; plus the
    // final rounding to float.
    const double bound = 10 * std::ldexp(1.0, -mean.fraction_bits()) / total;
    for (std::size_t i = 0; i < n; ++i) {
      const double expected = 0.5 + exact[i] / total;
      EXPECT_LE(std::abs(double(result[i]) - expected), bound + std::abs(expected) * 6e-8)
          << "promised " << promised << " value " << i;
    }
  }
}

// The fused path: add_measured measures exactly what validation measures, and folds what
// add folds (add is add_measured without its distance); remove takes a bad update back to
// the last bit.
TEST(FixedPointMean, AddMeasuredFoldsLikeAddAndMeasuresLikeValidation) {
  Rng rng(11);
  const std::size_t n = 1003;  // a tail past the 8 lanes
  std::vector<float> global(n);
  for (auto& g : global) {
    g = static_cast<float>(rng.normal());
  }
  std::vector<std::vector<float>> updates(3, global);
  for (auto& u : updates) {
    for (auto& v : u) {
      v += static_cast<float>(rng.normal() * 0.01);
    }
  }
  FixedPointMean plain(n), fused(n);
  plain.begin(global, 100);
  fused.begin(global, 100);
  for (std::size_t c = 0; c < updates.size(); ++c) {
    plain.add(updates[c], c + 1);
    const double squared = fused.add_measured(updates[c], c + 1);
    EXPECT_EQ(std::sqrt(squared), update_distance(updates[c], global)) << c;
  }
  EXPECT_EQ(fused.mean(), plain.mean());
}

// Folded on a pool, chunk by chunk on several threads: the same sum bits, the same mean and
// the same measured distances as on one thread, and the distance is the one validation
// measures (a model of several chunks and a short last one).
TEST(FixedPointMean, ParallelChunksGiveTheSameBitsAsOneThread) {
  Rng rng(13);
  const std::size_t n = 3 * FixedPointMean::kChunkValues + 1001;
  std::vector<float> global(n);
  for (auto& g : global) {
    g = static_cast<float>(rng.normal());
  }
  std::vector<std::vector<float>> updates(4, global);
  for (auto& u : updates) {
    for (auto& v : u) {
      v += static_cast<float>(rng.normal() * 0.01);
    }
  }
  auto bad = updates[0];
  bad[n - 1] = std::numeric_limits<float>::quiet_NaN();
  WorkerPool pool(3);
  FixedPointMean alone(n), parallel(n);
  parallel.use_workers(&pool);
  alone.begin(global, 1000);
  parallel.begin(global, 1000);
  for (std::size_t c = 0; c < updates.size(); ++c) {
    const double one = alone.add_measured(updates[c], 10 * c + 1);
    const double many = parallel.add_measured(updates[c], 10 * c + 1);
    EXPECT_EQ(one, many) << c;
    EXPECT_EQ(many, FixedPointMean::squared_distance(updates[c], global)) << c;
    EXPECT_EQ(std::sqrt(many), update_distance(updates[c], global)) << c;
  }
  EXPECT_TRUE(std::isnan(parallel.add_measured(bad, 7)));
  parallel.remove(bad, 7);
  EXPECT_EQ(parallel.count(), alone.count());
  EXPECT_EQ(parallel.mean(), alone.mean());
}

// A compressed update folded a chunk at a time, straight from its payload
// (protocol::StepDecoder through FixedPointMean::ChunkSource), gives the bits and distance
// of the decoded vector's fold, alone and on workers; removing it that way takes it back.
TEST(FixedPointMean, ChunkedFoldFromAnEncodedStepEqualsTheDecodedVectorsFold) {
  Rng rng(21);
  const std::size_t n = 2 * FixedPointMean::kChunkValues + 777;
  std::vector<float> global(n), step(n);
  for (std::size_t i = 0; i < n; ++i) {
    global[i] = static_cast<float>(rng.normal());
    step[i] = static_cast<float>(0.01 * rng.normal());
  }
  WorkerPool pool(2);
  for (const auto encoding : {protocol::UpdateEncoding::f16, protocol::UpdateEncoding::int8,
                              protocol::UpdateEncoding::topk}) {
    protocol::CompressionTerms terms;
    terms.up = encoding;
    terms.block = 300;  // not a divisor of the chunk: blocks straddle chunk borders
    terms.topk_fraction = 0.05;
    Rng rounding(5);
    std::vector<float> residual;
    const auto payload = protocol::encode_step(step, terms, rounding, &residual);
    std::vector<float> decoded;
    ASSERT_TRUE(protocol::decode_step(encoding, payload, global, decoded));
    auto decoder = protocol::StepDecoder::open(encoding, payload, n);
    ASSERT_TRUE(decoder) << decoder.error().message;
    const FixedPointMean::ChunkSource chunks = [&](std::size_t begin, std::span<float> out) {
      decoder->decode_range(begin, std::span<const float>(global).subspan(begin, out.size()), out);
    };
    for (WorkerPool* workers : {static_cast<WorkerPool*>(nullptr), &pool}) {
      FixedPointMean whole(n), streamed(n);
      whole.use_workers(workers);
      streamed.use_workers(workers);
      whole.begin(global, 100);
      streamed.begin(global, 100);
      const double a = whole.add_measured(decoded, 7);
      const double b = streamed.add_measured(chunks, 7);
      EXPECT_EQ(a, b) << protocol::encoding_name(encoding);
      EXPECT_EQ(whole.mean(), streamed.mean()) << protocol::encoding_name(encoding);
      // A second update, then the encoded one taken back chunk by chunk: only the second stays.
      auto other = global;
      other[0] += 1.0f;
      whole.add(other, 2);
      streamed.add(other, 2);
      streamed.remove(chunks, 7);
      FixedPointMean only_other(n);
      only_other.begin(global, 100);
      only_other.add(other, 2);
      EXPECT_EQ(streamed.mean(), only_other.mean()) << protocol::encoding_name(encoding);
      EXPECT_EQ(streamed.count(), 1u);
    }
  }
}

TEST(FixedPointMean, RemoveTakesABadUpdateBackToTheLastBit) {
  Rng rng(12);
  const std::size_t n = 517;
  std::vector<float> global(n);
  for (auto& g : global) {
    g = static_cast<float>(rng.normal());
  }
  auto good = global;
  for (auto& v : good) {
    v += 0.25f;
  }
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> bad(4, global);
  bad[0][3] = nan;
  bad[1][516] = -inf;
  bad[2][0] = 3e38f;  // far beyond the sum's range: its term adds 0, the sum stays finite
  // Each term within the sum's range, the distance past kMaxDistance: folded, then taken back.
  bad[3][100] += 60000.0f;
  bad[3][101] += 60000.0f;
  for (const auto& b : bad) {
    FixedPointMean expected(n), tried(n);
    expected.begin(global, 1u << 20);
    tried.begin(global, 1u << 20);
    expected.add(good, 3);
    tried.add(good, 3);
    const double squared = tried.add_measured(b, (1u << 20) - 3);
    EXPECT_FALSE(distance_allowed(squared, {})) << squared;
    tried.remove(b, (1u << 20) - 3);
    EXPECT_EQ(tried.count(), 1u);
    EXPECT_EQ(tried.total_weight(), 3u);
    EXPECT_EQ(tried.mean(), expected.mean());
  }
}

TEST(ValidateUpdate, TheDistanceRuleIsTheOneBothPathsApply) {
  UpdateChecks bounded;
  bounded.max_update_norm = 2;
  EXPECT_TRUE(distance_allowed(4.0, bounded));
  EXPECT_FALSE(distance_allowed(4.000001, bounded));
  EXPECT_TRUE(distance_allowed(65536.0 * 65536.0, {}));
  EXPECT_FALSE(distance_allowed(65536.0 * 65536.0 * 1.0000001, {}));
  EXPECT_FALSE(distance_allowed(std::numeric_limits<double>::quiet_NaN(), {}));
  EXPECT_FALSE(distance_allowed(std::numeric_limits<double>::infinity(), {}));
}

TEST(FixedPointMean, ANewRoundStartsFromZero) {
  const std::vector<float> zero(2, 0.0f);
  FixedPointMean mean(2);
  mean.begin(zero, 10);
  mean.add(std::vector<float>{1, 1}, 1);
  mean.begin(zero, 10);
  mean.add(std::vector<float>{4, 6}, 2);
  EXPECT_EQ(mean.mean(), (std::vector<float>{4, 6}));
  EXPECT_EQ(mean.count(), 1u);
  EXPECT_EQ(mean.total_weight(), 2u);
  mean.clear();
  EXPECT_EQ(mean.count(), 0u);
  // The sum is not zeroed between rounds: the first update writes it. A first update taken
  // back leaves zeros, and the next one starts from them.
  mean.begin(zero, 10);
  const std::vector<float> bad{std::numeric_limits<float>::quiet_NaN(), 3};
  EXPECT_TRUE(std::isnan(mean.add_measured(bad, 5)));
  mean.remove(bad, 5);
  mean.add(std::vector<float>{-2, 8}, 1);
  mean.add(std::vector<float>{4, 2}, 1);
  EXPECT_EQ(mean.mean(), (std::vector<float>{1, 5}));
}

// The run's own bound is optional; the aggregation's range is not.
TEST(ValidateUpdate, RejectsAnUpdateBeyondTheAggregationsRangeWithoutABoundOfTheRun) {
  model::ParamLayout layout;
  layout.append("w", {2});
  const std::vector<float> global(2, 0.0f);
  const std::vector<float> far{70000.0f, 0.0f}, near{60000.0f, 0.0f};
  const auto r = validate_update(far, layout.fingerprint_hex(), 1, global, layout, {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, Rejection::norm);
  EXPECT_EQ(r->message,
            "update moves the model by L2 norm 70000.000000, above the aggregation's limit "
            "65536.000000");
  EXPECT_FALSE(validate_update(near, layout.fingerprint_hex(), 1, global, layout, {}));
}

TEST(ValidateUpdate, AcceptsAGoodUpdate) {
  const auto layout = small_layout();
  const std::vector<float> global(8, 0.0f), update(8, 0.1f);
  EXPECT_FALSE(validate_update(update, layout.fingerprint_hex(), 10, global, layout, {}));
}

TEST(ValidateUpdate, RejectsEachBadUpdateWithItsReason) {
  const auto layout = small_layout();
  const std::vector<float> global(8, 0.0f);
  std::vector<float> nan_update(8, 0.0f);
  nan_update[6] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> inf_update(8, 0.0f);
  inf_update[1] = std::numeric_limits<float>::infinity();

  auto r = validate_update(nan_update, layout.fingerprint_hex(), 10, global, layout, {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, Rejection::non_finite);
  EXPECT_NE(r->message.find("fc.bias[0] is NaN"), std::string::npos) << r->message;

  r = validate_update(inf_update, layout.fingerprint_hex(), 10, global, layout, {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, Rejection::non_finite);
  EXPECT_NE(r->message.find("fc.weight[1] is infinite"), std::string::npos) << r->message;

  r = validate_update(std::vector<float>(7, 0.0f), layout.fingerprint_hex(), 10, global, layout,
                      {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, Rejection::shape);
  EXPECT_NE(r->message.find("7 values, the model has 8"), std::string::npos);

  r = validate_update(global, "0000000000000000", 10, global, layout, {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, Rejection::layout);

  r = validate_update(global, layout.fingerprint_hex(), 0, global, layout, {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, Rejection::samples);

  std::vector<float> far(8, 1.0f);  // L2 distance sqrt(8) = 2.83
  r = validate_update(far, layout.fingerprint_hex(), 10, global, layout, {.max_update_norm = 2.0});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, Rejection::norm);
  EXPECT_NE(r->message.find("2.828"), std::string::npos) << r->message;
  EXPECT_FALSE(
      validate_update(far, layout.fingerprint_hex(), 10, global, layout, {.max_update_norm = 3.0}));
}

TEST(ValidateUpdate, EachRejectionHasAStableName) {
  // The names are a public contract: metrics labels and the reason_code of events.
  EXPECT_EQ(rejection_name(Rejection::layout), "layout");
  EXPECT_EQ(rejection_name(Rejection::shape), "shape");
  EXPECT_EQ(rejection_name(Rejection::non_finite), "non_finite");
  EXPECT_EQ(rejection_name(Rejection::samples), "samples");
  EXPECT_EQ(rejection_name(Rejection::norm), "norm");
}

TEST(Strategy, UnknownNameIsInvalidArgument) {
  auto s = make_strategy("fedmagic", 4);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, errc::invalid_argument);
}

}  // namespace
}  // namespace fedcore::federation
