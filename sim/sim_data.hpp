// The data of a simulation: one load of the data set, its partition among the simulated
// sites, and each site's local share.
//
// The training split is partitioned with data/partition.hpp (iid, dirichlet:A, shards:K,
// seeded with the run's seed); the test split stays whole for the global evaluation of
// each round's model, and is also dealt among the sites as their local test data for
// federated evaluation: IID (as ClientDaemon does for a partitioned data source), or with
// --site-test like-train in each site's training class proportions (data::partition_like).
// Breast-cancer is split 80/20 (stratified, seeded) and standardised with the training
// part's statistics, like fedcore-train does.
#pragma once

#include <string>
#include <vector>

#include "client/site_data.hpp"
#include "shared/data/dataset.hpp"
#include "shared/data/partition.hpp"
#include "shared/util/error.hpp"
#include "sim/options.hpp"

namespace fedcore::sim {

struct SimData {
  data::TrainTest all;                                 // the whole training and test splits
  data::Partitions train_parts;                        // [client] -> indices into all.train
  data::Partitions test_parts;                         // [client] -> indices into all.test
  std::vector<std::vector<std::size_t>> label_counts;  // [client][class] of train_parts
};

// Loads the data set named by the options (respecting train_limit / test_limit).
// Errors: those of the loaders, naming the file.
result<data::TrainTest> load_dataset(const SimOptions& options);

// Loads and partitions. Errors: load_dataset's; invalid_argument when the partition
// cannot give every client a sample (more clients than training samples, or than shards).
result<SimData> prepare_data(const SimOptions& options);

// Client `index`'s local training and test data, loaded on demand (client/site_data.hpp):
// the site holds only its shape, and each round's training gathers its samples from `data`
// and frees them after, so a simulated site costs no memory for samples while it is not
// training (100,000 sites of which a round samples 1,000).
// `flip_labels`: a label-flipping attacker (sim/attack.hpp) trains with every label y
// replaced by C - 1 - y; its test data stays true.
// REQUIRES: index < number of clients; `data` outlives the site.
client::SiteData site_data(const SimData& data, std::size_t index, bool flip_labels = false);

// The id of simulated client `index` of `clients`: "site-0001"..., zero-padded so that
// the server's id order is the index order.
std::string client_id(std::size_t index, std::size_t clients);

}  // namespace fedcore::sim
