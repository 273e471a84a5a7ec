// DataSource: where a site's private data comes from, and how it is split into the part
// it trains on and the local test part used for federated evaluation.
//
// One interface for every format: load_local_data() picks the loader by `format` —
//   "csv"            a CSV table (label column named or last), split stratified;
//   "fashion-mnist"  the IDX files of Fashion-MNIST (train/test as shipped);
//   "cifar10"        the CIFAR-10 binary batches in a folder (train/test as shipped).
// A partition (for testing with a public data set) keeps one site's share of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "shared/data/dataset.hpp"
#include "shared/util/error.hpp"

namespace fedcore::client {

struct DataSource {
  std::string format = "csv";  // "csv" | "fashion-mnist" | "cifar10"
  std::string path;            // CSV file, or the data set's folder ("" = Fashion-MNIST default)
  std::string label_column;    // CSV only ("" = last column)
  // For testing with a known data set: use only partition `index` of `clients` parts.
  std::string partition = "";  // "" = all data, else "iid", "dirichlet:0.5", "shards:2"
  std::size_t partition_clients = 1;
  std::size_t partition_index = 0;
  std::uint64_t partition_seed = 1;
  double test_fraction = 0.2;  // local test split of a CSV (stratified), for evaluation
  std::uint64_t split_seed = 1;
};

// Loads a DataSource into a training part and a local test part. Errors: those of the
// loaders (naming the file), invalid_argument for an unknown format, a bad partition spec
// or a partition index out of range.
result<data::TrainTest> load_local_data(const DataSource& source);

}  // namespace fedcore::client
