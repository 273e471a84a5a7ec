// Partitioners: which samples each simulated federated client holds.
//
// Each returns one index list per client (ascending indices into the label vector). Except
// with `sample`, every sample is assigned to exactly one client. The result depends only on
// the arguments and the seed (fedcore::Rng streams are identical across platforms).
//
//   iid        shuffle, then deal into near-equal parts (sizes differ by at most 1).
//   dirichlet  label skew after Hsu, Qi and Brown (2019): each class is divided among
//              clients in proportions drawn from Dirichlet(alpha); small alpha (0.1) gives
//              each client a few dominant classes, large alpha (100) approaches IID.
//   shards     pathological non-IID of McMahan et al. (2017): sort by label, cut into
//              clients * k equal shards, give each client k random shards, so a client sees
//              at most about k classes.
//   sample     each client draws k distinct samples uniformly at random, independently of
//              the others: the one partitioner whose clients share samples (and may leave
//              some unused). It lets more clients than samples train, e.g. 100,000 simulated
//              sites on Fashion-MNIST's 60,000 training images.
//
// Invalid arguments (clients == 0, clients > samples, alpha <= 0, k == 0, clients * k >
// samples, labels outside [0, num_classes)) are programmer errors and abort through
// FEDCORE_ASSERT; user-supplied specs go through parse_partition_spec, which returns errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shared/util/error.hpp"

namespace fedcore::data {

using Partitions = std::vector<std::vector<std::size_t>>;  // [client] -> sample indices

// REQUIRES: 0 < clients <= labels.size().
Partitions partition_iid(std::span<const std::int32_t> labels, std::size_t clients,
                         std::uint64_t seed);

inline constexpr int kDirichletMaxDraws = 100;

// Every client gets at least one sample: a draw that leaves a client empty is redrawn (up
// to kDirichletMaxDraws times, continuing the same random stream); if every draw leaves
// one empty, each empty client in turn takes the most recently assigned sample of the
// then-largest client (the lowest-numbered one on ties).
// REQUIRES: 0 < clients <= labels.size(); alpha > 0 and finite; labels in [0, num_classes).
Partitions partition_dirichlet(std::span<const std::int32_t> labels, std::int32_t num_classes,
                               std::size_t clients, double alpha, std::uint64_t seed);

// Shard sizes differ by at most 1 when clients * k does not divide the sample count.
// REQUIRES: clients > 0; shards_per_client > 0; clients * shards_per_client <= labels.size().
Partitions partition_shards(std::span<const std::int32_t> labels, std::size_t clients,
                            std::size_t shards_per_client, std::uint64_t seed);

// REQUIRES: clients > 0; 0 < samples_per_client <= samples.
Partitions partition_sampled(std::size_t samples, std::size_t clients,
                             std::size_t samples_per_client, std::uint64_t seed);

// Deals `labels` (a test split) so that each client's share of every class follows its
// share of that class in `counts` (label_count_table of its training split): the samples of
// class k are shuffled and cut in proportion to counts[client][k] (largest remainders,
// ties to the lower client). A class no client trained on goes to nobody. Personalised
// evaluation (FedBN, docs/sim.md "--site-test") needs test data distributed like training.
// REQUIRES: counts.size() > 0, every row num_classes long; labels in [0, num_classes).
Partitions partition_like(std::span<const std::int32_t> labels, std::int32_t num_classes,
                          const std::vector<std::vector<std::size_t>>& counts, std::uint64_t seed);

enum class PartitionKind { iid, dirichlet, shards, sample };

struct PartitionSpec {
  PartitionKind kind = PartitionKind::iid;
  double alpha = 0;                    // dirichlet only
  std::size_t shards_per_client = 0;   // shards only
  std::size_t samples_per_client = 0;  // sample only

  // The text parse_partition_spec accepts: "iid", "dirichlet:0.5", "shards:2", "sample:60".
  std::string to_string() const;
};

// Parses "iid", "dirichlet:<alpha>" (alpha a finite number > 0), "shards:<k>" or
// "sample:<k>" (k an integer in 1..1000000). Errors: invalid_argument naming the spec and what is
// wrong (unknown kind, missing or unexpected parameter, malformed or out-of-range number).
result<PartitionSpec> parse_partition_spec(std::string_view text);

// The fewest samples `spec` can divide among `clients`: one per client, k shards per client,
// or k for sample:k (whose clients share samples).
std::size_t samples_needed(const PartitionSpec& spec, std::size_t clients) noexcept;

// Dispatches to the partitioner `spec` names. REQUIRES: as that partitioner (at least
// samples_needed(spec, clients) labels).
Partitions partition(const PartitionSpec& spec, std::span<const std::int32_t> labels,
                     std::int32_t num_classes, std::size_t clients, std::uint64_t seed);

// counts[client][class]: how many samples of each class each client holds.
// REQUIRES: every index < labels.size(); labels in [0, num_classes).
std::vector<std::vector<std::size_t>> label_count_table(const Partitions& partitions,
                                                        std::span<const std::int32_t> labels,
                                                        std::int32_t num_classes);

// A fixed-width text table of label_count_table's output, one row per client plus a total
// row, with a total column; columns are headed by class_names when given (one per class)
// and by class index otherwise. Ends with a newline.
std::string format_label_counts(const std::vector<std::vector<std::size_t>>& counts,
                                std::span<const std::string> class_names = {});

}  // namespace fedcore::data
