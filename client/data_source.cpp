#include "client/data_source.hpp"

#include "shared/data/cifar10.hpp"
#include "shared/data/csv.hpp"
#include "shared/data/fashion_mnist.hpp"
#include "shared/data/partition.hpp"
#include "shared/data/split.hpp"

namespace fedcore::client {
namespace {

struct Loaded {
  data::Dataset train;
  data::Dataset test;
  bool has_test_set = false;  // the format ships its own test set (else a CSV is split)
};

result<Loaded> load_format(const DataSource& source) {
  if (source.format == "csv") {
    auto table = data::load_csv(source.path, {.label_column = source.label_column});
    if (!table) {
      return table.error();
    }
    return Loaded{std::move(*table), {}, false};
  }
  if (source.format == "fashion-mnist") {
    auto fmnist =
        source.path.empty() ? data::load_fashion_mnist() : data::load_fashion_mnist(source.path);
    if (!fmnist) {
      return fmnist.error();
    }
    return Loaded{std::move(fmnist->train), std::move(fmnist->test), true};
  }
  if (source.format == "cifar10") {
    if (source.path.empty()) {
      return fail(errc::invalid_argument,
                  "data format \"cifar10\" needs a path: the folder of data_batch_*.bin");
    }
    auto cifar = data::load_cifar10(source.path);
    if (!cifar) {
      return cifar.error();
    }
    return Loaded{std::move(cifar->train), std::move(cifar->test), true};
  }
  return fail(errc::invalid_argument,
              "data format must be \"csv\", \"fashion-mnist\" or \"cifar10\", got \"" +
                  source.format + "\"");
}

}  // namespace

result<data::TrainTest> load_local_data(const DataSource& source) {
  auto loaded = load_format(source);
  if (!loaded) {
    return loaded.error();
  }
  data::Dataset all = std::move(loaded->train);
  data::Dataset test_pool = std::move(loaded->test);
  const bool has_test_pool = loaded->has_test_set;
  if (!source.partition.empty()) {
    auto spec = data::parse_partition_spec(source.partition);
    if (!spec) {
      return spec.error();
    }
    if (source.partition_clients == 0 || source.partition_index >= source.partition_clients) {
      return fail(errc::invalid_argument,
                  "partition index " + std::to_string(source.partition_index) + " of " +
                      std::to_string(source.partition_clients) + " clients is out of range");
    }
    if (const auto needed = data::samples_needed(*spec, source.partition_clients);
        needed > all.size()) {
      return fail(errc::invalid_argument, "partition " + source.partition + " of " +
                                              std::to_string(source.partition_clients) +
                                              " clients needs at least " + std::to_string(needed) +
                                              " training samples; the data has " +
                                              std::to_string(all.size()));
    }
    auto parts = data::partition(*spec, all.labels, all.num_classes, source.partition_clients,
                                 source.partition_seed);
    all = all.subset(parts[source.partition_index]);
    if (has_test_pool && source.partition_clients <= test_pool.size()) {
      // Each simulated site also gets its own slice of the public test set (sites that
      // outnumber its samples keep all of it).
      auto test_parts =
          data::partition_iid(test_pool.labels, source.partition_clients, source.partition_seed);
      test_pool = test_pool.subset(test_parts[source.partition_index]);
    }
  }
  if (has_test_pool) {
    return data::TrainTest{std::move(all), std::move(test_pool)};
  }
  if (source.test_fraction <= 0) {
    return data::TrainTest{std::move(all), data::Dataset{}};
  }
  auto split = data::stratified_split(all, source.test_fraction, source.split_seed);
  return data::TrainTest{std::move(split.train), std::move(split.test)};
}

}  // namespace fedcore::client
