#include "shared/data/partition.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "shared/util/rng.hpp"

namespace fedcore::data {
namespace {

using ::testing::HasSubstr;

// `per_class` samples of each of `classes` classes, in a shuffled order.
std::vector<std::int32_t> balanced_labels(std::int32_t classes, std::size_t per_class,
                                          std::uint64_t seed = 99) {
  std::vector<std::int32_t> labels;
  for (std::int32_t k = 0; k < classes; ++k) {
    labels.insert(labels.end(), per_class, k);
  }
  Rng rng(seed);
  rng.shuffle(std::span(labels));
  return labels;
}

void expect_exact_cover(const Partitions& parts, std::size_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& part : parts) {
    EXPECT_TRUE(std::is_sorted(part.begin(), part.end()));
    for (std::size_t index : part) {
      ASSERT_LT(index, n);
      ++seen[index];
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(seen[i], 1) << "sample " << i;
  }
}

// Mean over clients of the total-variation distance between the client's label
// distribution and the global one: 0 for perfectly IID, approaching 1 for one class each.
double mean_label_skew(const Partitions& parts, const std::vector<std::int32_t>& labels,
                       std::int32_t classes) {
  const auto table = label_count_table(parts, labels, classes);
  const double global = 1.0 / classes;  // balanced_labels
  double total = 0;
  for (const auto& row : table) {
    double size = 0;
    for (auto count : row) {
      size += static_cast<double>(count);
    }
    double tv = 0;
    for (auto count : row) {
      tv += std::abs(static_cast<double>(count) / size - global);
    }
    total += tv / 2;
  }
  return total / static_cast<double>(table.size());
}

TEST(PartitionIidTest, CoversAndNearEqualSizes) {
  const auto labels = balanced_labels(10, 100, 1);
  for (std::size_t clients : {1u, 3u, 7u, 10u, 1000u}) {
    const Partitions parts = partition_iid(labels, clients, 5);
    ASSERT_EQ(parts.size(), clients);
    expect_exact_cover(parts, labels.size());
    const auto [smallest, largest] =
        std::minmax_element(parts.begin(), parts.end(),
                            [](const auto& a, const auto& b) { return a.size() < b.size(); });
    EXPECT_LE(largest->size() - smallest->size(), 1u) << clients << " clients";
  }
}

TEST(PartitionIidTest, DeterministicForSeed) {
  const auto labels = balanced_labels(10, 100);
  EXPECT_EQ(partition_iid(labels, 7, 1), partition_iid(labels, 7, 1));
  EXPECT_NE(partition_iid(labels, 7, 1), partition_iid(labels, 7, 2));
}

TEST(PartitionLikeTest, DealsEachClassInTheTrainingProportions) {
  const auto labels = balanced_labels(3, 100);
  // Client 0 trained on classes 0 and 1 (3:1 against client 1 for class 0), client 1 on
  // classes 0 and 2, client 2 on class 2 only (1:1 against client 1).
  const std::vector<std::vector<std::size_t>> counts{{30, 50, 0}, {10, 0, 20}, {0, 0, 20}};
  const auto parts = partition_like(labels, 3, counts, 4);
  expect_exact_cover(parts, labels.size());
  const auto got = label_count_table(parts, labels, 3);
  EXPECT_EQ(got[0], (std::vector<std::size_t>{75, 100, 0}));
  EXPECT_EQ(got[1], (std::vector<std::size_t>{25, 0, 50}));
  EXPECT_EQ(got[2], (std::vector<std::size_t>{0, 0, 50}));
  EXPECT_EQ(partition_like(labels, 3, counts, 4), parts);  // seeded
  EXPECT_NE(partition_like(labels, 3, counts, 5), parts);
}

TEST(PartitionLikeTest, RoundsByLargestRemainderAndSkipsUntrainedClasses) {
  const auto labels = balanced_labels(2, 10);
  // Class 0: thirds of 10 -> 4, 3, 3 (the first remainder wins the tie); class 1: nobody.
  const std::vector<std::vector<std::size_t>> counts{{1, 0}, {1, 0}, {1, 0}};
  const auto got = label_count_table(partition_like(labels, 2, counts, 1), labels, 2);
  EXPECT_EQ(got[0], (std::vector<std::size_t>{4, 0}));
  EXPECT_EQ(got[1], (std::vector<std::size_t>{3, 0}));
  EXPECT_EQ(got[2], (std::vector<std::size_t>{3, 0}));
}

TEST(PartitionDirichletTest, CoversAndEveryClientNonEmpty) {
  const auto labels = balanced_labels(10, 1000);
  for (double alpha : {0.01, 0.1, 1.0, 100.0}) {
    const Partitions parts = partition_dirichlet(labels, 10, 10, alpha, 3);
    ASSERT_EQ(parts.size(), 10u);
    expect_exact_cover(parts, labels.size());
    for (const auto& part : parts) {
      EXPECT_FALSE(part.empty()) << "alpha " << alpha;
    }
  }
}

TEST(PartitionDirichletTest, FallbackFillsEveryClient) {
  // As many clients as samples at tiny alpha: redraws all but certainly fail, so the
  // deterministic repair must give each client exactly one sample.
  const auto labels = balanced_labels(2, 10);
  const Partitions parts = partition_dirichlet(labels, 2, 20, 0.01, 4);
  expect_exact_cover(parts, labels.size());
  for (const auto& part : parts) {
    EXPECT_EQ(part.size(), 1u);
  }
  EXPECT_EQ(parts, partition_dirichlet(labels, 2, 20, 0.01, 4));
}

TEST(PartitionDirichletTest, DeterministicForSeed) {
  const auto labels = balanced_labels(10, 200);
  EXPECT_EQ(partition_dirichlet(labels, 10, 8, 0.5, 9), partition_dirichlet(labels, 10, 8, 0.5, 9));
  EXPECT_NE(partition_dirichlet(labels, 10, 8, 0.5, 9),
            partition_dirichlet(labels, 10, 8, 0.5, 10));
}

TEST(PartitionDirichletTest, SkewGrowsAsAlphaFalls) {
  const auto labels = balanced_labels(10, 1000);
  std::vector<double> skew;
  for (double alpha : {0.1, 1.0, 100.0}) {
    double sum = 0;
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      sum += mean_label_skew(partition_dirichlet(labels, 10, 10, alpha, seed), labels, 10);
    }
    skew.push_back(sum / 3);
  }
  EXPECT_GT(skew[0], skew[1]);
  EXPECT_GT(skew[1], skew[2]);
  EXPECT_GT(skew[0], 0.5);  // alpha 0.1: a few classes dominate each client
  EXPECT_LT(skew[2], 0.1);  // alpha 100: close to IID
  const double iid = mean_label_skew(partition_iid(labels, 10, 1), labels, 10);
  EXPECT_LT(iid, 0.1);
}

TEST(PartitionShardsTest, CoversAndLimitsLabelsPerClient) {
  const auto labels = balanced_labels(10, 1000);
  for (std::size_t k : {1u, 2u, 5u}) {
    const Partitions parts = partition_shards(labels, 10, k, 6);
    ASSERT_EQ(parts.size(), 10u);
    expect_exact_cover(parts, labels.size());
    for (const auto& part : parts) {
      EXPECT_EQ(part.size(), 1000u);
      std::set<std::int32_t> distinct;
      for (std::size_t index : part) {
        distinct.insert(labels[index]);
      }
      // 1000-sample classes and 1000/k-sample shards: no shard straddles two classes.
      EXPECT_LE(distinct.size(), k);
    }
  }
}

TEST(PartitionShardsTest, UnevenShardsStillCover) {
  const auto labels = balanced_labels(3, 334);  // 1002 samples
  const Partitions parts = partition_shards(labels, 7, 3, 2);
  expect_exact_cover(parts, labels.size());
  for (const auto& part : parts) {
    EXPECT_GE(part.size(), 3 * (1002 / 21));
    EXPECT_LE(part.size(), 3 * (1002 / 21 + 1));
  }
  // Each of the 21 shards is 47 or 48 samples of (mostly) one class: about 3 labels each.
  for (const auto& part : parts) {
    std::set<std::int32_t> distinct;
    for (std::size_t index : part) {
      distinct.insert(labels[index]);
    }
    EXPECT_LE(distinct.size(), 3u);
  }
}

TEST(PartitionShardsTest, DeterministicForSeed) {
  const auto labels = balanced_labels(10, 100);
  EXPECT_EQ(partition_shards(labels, 5, 2, 1), partition_shards(labels, 5, 2, 1));
  EXPECT_NE(partition_shards(labels, 5, 2, 1), partition_shards(labels, 5, 2, 2));
}

// More clients than samples: each draws k distinct samples; clients overlap, and over many
// clients every sample is drawn about clients * k / n times.
TEST(PartitionSampledTest, EveryClientDrawsKDistinctSamplesAndClientsShareThem) {
  constexpr std::size_t kSamples = 500;
  constexpr std::size_t kClients = 2'000;
  constexpr std::size_t kPerClient = 10;
  const auto parts = partition_sampled(kSamples, kClients, kPerClient, 3);
  ASSERT_EQ(parts.size(), kClients);
  std::vector<std::size_t> drawn(kSamples, 0);
  for (const auto& part : parts) {
    ASSERT_EQ(part.size(), kPerClient);
    ASSERT_TRUE(std::is_sorted(part.begin(), part.end()));
    ASSERT_EQ(std::adjacent_find(part.begin(), part.end()), part.end()) << "distinct";
    ASSERT_LT(part.back(), kSamples);
    for (const auto index : part) {
      ++drawn[index];
    }
  }
  // Each sample is drawn Binomial(2000, 10/500): mean 40, sd about 6.3; 40 +- 35 holds
  // for all 500 with overwhelming probability, and a biased draw (e.g. always the first
  // or last k) would leave most at 0.
  for (const auto count : drawn) {
    EXPECT_GT(count, 5u);
    EXPECT_LT(count, 75u);
  }
  EXPECT_EQ(partition_sampled(kSamples, kClients, kPerClient, 3), parts);
  EXPECT_NE(partition_sampled(kSamples, kClients, kPerClient, 4), parts);
  // k = n: every client holds every sample.
  const auto all = partition_sampled(5, 3, 5, 1);
  for (const auto& part : all) {
    EXPECT_EQ(part, (std::vector<std::size_t>{0, 1, 2, 3, 4}));
  }
}

TEST(PartitionSpecTest, ParsesGoodSpecs) {
  auto iid = parse_partition_spec("iid");
  ASSERT_TRUE(iid.has_value()) << iid.error().to_string();
  EXPECT_EQ(iid->kind, PartitionKind::iid);
  EXPECT_EQ(iid->to_string(), "iid");

  auto dirichlet = parse_partition_spec("dirichlet:0.5");
  ASSERT_TRUE(dirichlet.has_value()) << dirichlet.error().to_string();
  EXPECT_EQ(dirichlet->kind, PartitionKind::dirichlet);
  EXPECT_DOUBLE_EQ(dirichlet->alpha, 0.5);
  EXPECT_EQ(dirichlet->to_string(), "dirichlet:0.5");

  auto shards = parse_partition_spec("shards:2");
  ASSERT_TRUE(shards.has_value()) << shards.error().to_string();
  EXPECT_EQ(shards->kind, PartitionKind::shards);
  EXPECT_EQ(shards->shards_per_client, 2u);
  EXPECT_EQ(shards->to_string(), "shards:2");

  auto sample = parse_partition_spec("sample:60");
  ASSERT_TRUE(sample.has_value()) << sample.error().to_string();
  EXPECT_EQ(sample->kind, PartitionKind::sample);
  EXPECT_EQ(sample->samples_per_client, 60u);
  EXPECT_EQ(sample->to_string(), "sample:60");

  auto exponent = parse_partition_spec("dirichlet:1e2");
  ASSERT_TRUE(exponent.has_value());
  EXPECT_DOUBLE_EQ(exponent->alpha, 100.0);
}

TEST(PartitionSpecTest, RejectsBadSpecs) {
  for (const std::string text : {"",
                                 "foo",
                                 "IID",
                                 "iid:1",
                                 "iid:",
                                 "dirichlet",
                                 "dirichlet:",
                                 "dirichlet:abc",
                                 "dirichlet:0",
                                 "dirichlet:-1",
                                 "dirichlet:inf",
                                 "dirichlet:nan",
                                 "dirichlet:0.5x",
                                 "shards",
                                 "shards:",
                                 "shards:0",
                                 "shards:x",
                                 "shards:-1",
                                 "shards:1.5",
                                 "shards:99999999999999999999",
                                 "shards:2000000",
                                 "sample",
                                 "sample:",
                                 "sample:0",
                                 "sample:1.5",
                                 "sample:2000000",
                                 " iid"}) {
    auto spec = parse_partition_spec(text);
    ASSERT_FALSE(spec.has_value()) << "'" << text << "' parsed";
    EXPECT_EQ(spec.error().code, errc::invalid_argument);
    if (!text.empty()) {
      EXPECT_THAT(spec.error().message, HasSubstr("'" + text + "'"));
    }
  }
  EXPECT_THAT(parse_partition_spec("foo").error().message, HasSubstr("unknown kind 'foo'"));
  EXPECT_THAT(parse_partition_spec("dirichlet:0").error().message, HasSubstr("> 0"));
}

TEST(PartitionSpecTest, PartitionDispatches) {
  const auto labels = balanced_labels(10, 50);
  EXPECT_EQ(partition(*parse_partition_spec("iid"), labels, 10, 4, 8), partition_iid(labels, 4, 8));
  EXPECT_EQ(partition(*parse_partition_spec("dirichlet:0.3"), labels, 10, 4, 8),
            partition_dirichlet(labels, 10, 4, 0.3, 8));
  EXPECT_EQ(partition(*parse_partition_spec("shards:2"), labels, 10, 4, 8),
            partition_shards(labels, 4, 2, 8));
  EXPECT_EQ(partition(*parse_partition_spec("sample:7"), labels, 10, 4, 8),
            partition_sampled(labels.size(), 4, 7, 8));
}

TEST(LabelCountsTest, TableAndFormat) {
  const std::vector<std::int32_t> labels{0, 1, 1, 2, 2, 2};
  const Partitions parts{{0, 1}, {2, 3, 4, 5}};
  const auto table = label_count_table(parts, labels, 3);
  EXPECT_EQ(table, (std::vector<std::vector<std::size_t>>{{1, 1, 0}, {0, 1, 3}}));

  const std::string text = format_label_counts(table);
  EXPECT_EQ(text,
            "client  0  1  2  total\n"
            "     0  1  1  0      2\n"
            "     1  0  1  3      4\n"
            " total  1  2  3      6\n");
  const std::vector<std::string> names{"cat", "dog", "bird"};
  EXPECT_THAT(format_label_counts(table, names), HasSubstr("client  cat  dog  bird  total\n"));
}

TEST(PartitionDeathTest, InvalidArgumentsAbort) {
  const auto labels = balanced_labels(2, 5);
  EXPECT_DEATH(partition_iid(labels, 0, 1), "clients");
  EXPECT_DEATH(partition_iid(labels, 11, 1), "clients");
  EXPECT_DEATH(partition_dirichlet(labels, 2, 3, 0.0, 1), "alpha");
  EXPECT_DEATH(partition_shards(labels, 2, 0, 1), "shards");
  EXPECT_DEATH(partition_shards(labels, 3, 4, 1), "shards");
}

}  // namespace
}  // namespace fedcore::data
