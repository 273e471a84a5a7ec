#include "sim/sim_data.hpp"

#include <algorithm>
#include <numeric>

#include "shared/data/cifar10.hpp"
#include "shared/data/csv.hpp"
#include "shared/data/fashion_mnist.hpp"
#include "shared/data/normalize.hpp"
#include "shared/data/split.hpp"
#include "shared/util/source_tree.hpp"

namespace fedcore::sim {
namespace {

data::Dataset first_n(data::Dataset d, std::size_t n) {
  if (n == 0 || n >= d.size()) {
    return d;
  }
  std::vector<std::size_t> first(n);
  std::iota(first.begin(), first.end(), std::size_t{0});
  return d.subset(first);
}

}  // namespace

result<data::TrainTest> load_dataset(const SimOptions& o) {
  data::TrainTest loaded;
  if (o.dataset == "fashion-mnist") {
    auto fmnist =
        o.data_path.empty() ? data::load_fashion_mnist() : data::load_fashion_mnist(o.data_path);
    if (!fmnist) {
      return fmnist.error();
    }
    loaded = std::move(*fmnist);
  } else if (o.dataset == "cifar10") {
    auto cifar = data::load_cifar10(o.data_path);
    if (!cifar) {
      return cifar.error();
    }
    loaded = std::move(*cifar);
  } else if (o.dataset == "breast-cancer") {
    const std::string path = o.data_path.empty()
                                 ? fedcore::source_path("data/breast_cancer_wisconsin.csv")
                                 : o.data_path;
    auto table = data::load_csv(path, {.label_column = "benign"});
    if (!table) {
      return table.error();
    }
    auto split = data::stratified_split(*table, 0.2, o.seed);
    // Standardised with statistics of the training part only, as a real site would
    // after agreeing on the preprocessing.
    const auto standardizer = data::Standardizer::fit(split.train);
    standardizer.apply(split.train);
    standardizer.apply(split.test);
    loaded = data::TrainTest{std::move(split.train), std::move(split.test)};
  } else {
    return fail(errc::invalid_argument, "unknown data set '" + o.dataset + "'");
  }
  loaded.train = first_n(std::move(loaded.train), o.train_limit);
  loaded.test = first_n(std::move(loaded.test), o.test_limit);
  return loaded;
}

result<SimData> prepare_data(const SimOptions& o) {
  auto loaded = load_dataset(o);
  if (!loaded) {
    return loaded.error();
  }
  auto spec = data::parse_partition_spec(o.partition);
  if (!spec) {
    return spec.error();
  }
  const auto& train = loaded->train;
  const std::size_t needed = data::samples_needed(*spec, o.clients);
  if (needed > train.size()) {
    if (spec->kind == data::PartitionKind::sample) {
      return fail(errc::invalid_argument,
                  "--partition " + o.partition + " needs at least " + std::to_string(needed) +
                      " training samples; the data has " + std::to_string(train.size()));
    }
    return fail(errc::invalid_argument, std::to_string(o.clients) + " clients need at least " +
                                            std::to_string(needed) +
                                            " training samples with --partition " + o.partition +
                                            "; the data has " + std::to_string(train.size()));
  }
  SimData out;
  out.train_parts = data::partition(*spec, train.labels, train.num_classes, o.clients, o.seed);
  out.label_counts = data::label_count_table(out.train_parts, train.labels, train.num_classes);
  if (o.site_test == "like-train") {
    out.test_parts = data::partition_like(loaded->test.labels, loaded->test.num_classes,
                                          out.label_counts, o.seed);
  } else if (loaded->test.size() >= o.clients) {
    out.test_parts = data::partition_iid(loaded->test.labels, o.clients, o.seed);
  } else {
    out.test_parts.assign(o.clients, {});
  }
  out.all = std::move(*loaded);
  return out;
}

client::SiteData site_data(const SimData& d, std::size_t index, bool flip_labels) {
  client::SiteDataShape shape{d.train_parts.at(index).size(), d.test_parts.at(index).size(),
                              d.all.train.sample_shape, d.all.train.num_classes};
  return client::SiteData(std::move(shape), [&d, index, flip_labels] {
    data::TrainTest local{d.all.train.subset(d.train_parts.at(index)),
                          d.all.test.subset(d.test_parts.at(index))};
    if (flip_labels) {
      const auto last = static_cast<std::int32_t>(local.train.num_classes) - 1;
      for (auto& y : local.train.labels) {
        y = last - y;
      }
    }
    return local;
  });
}

std::string client_id(std::size_t index, std::size_t clients) {
  const auto width = std::max<std::size_t>(3, std::to_string(clients).size());
  auto number = std::to_string(index + 1);
  return "site-" + std::string(width - std::min(width, number.size()), '0') + number;
}

}  // namespace fedcore::sim
