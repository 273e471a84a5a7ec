// fedcore-train: trains one model centrally on one machine and reports test accuracy and
// throughput. It is the single-node baseline that federated runs are compared with.
#include <chrono>
#include <cstdio>
#include <string>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "shared/data/cifar10.hpp"
#include "shared/data/csv.hpp"
#include "shared/data/fashion_mnist.hpp"
#include "shared/data/normalize.hpp"
#include "shared/data/split.hpp"
#include "shared/model/param_io.hpp"
#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"
#include "shared/util/threads.hpp"

namespace {

using fedcore::result;
using fedcore::data::TrainTest;

struct Options {
  std::string data = "fashion-mnist";
  std::string data_path;
  std::string model = R"({"type":"cnn"})";
  std::string optimizer = "sgd";
  float lr = 0.05f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  int epochs = 1;
  int batch = 32;
  std::uint64_t seed = 1;
  int threads = 0;
  std::size_t train_limit = 0;
  std::string save;
  std::string export_npy;
  bool quiet = false;
};

result<TrainTest> load_data(const Options& o) {
  if (o.data == "fashion-mnist") {
    return o.data_path.empty() ? fedcore::data::load_fashion_mnist()
                               : fedcore::data::load_fashion_mnist(o.data_path);
  }
  if (o.data == "cifar10") {
    if (o.data_path.empty()) {
      return fedcore::fail(fedcore::errc::invalid_argument, "--data cifar10 needs --data-path DIR");
    }
    return fedcore::data::load_cifar10(o.data_path);
  }
  if (o.data == "breast-cancer") {
    const std::string path = o.data_path.empty()
                                 ? std::string(FEDCORE_DATA_DIR "/breast_cancer_wisconsin.csv")
                                 : o.data_path;
    auto table = fedcore::data::load_csv(path, {.label_column = "benign"});
    if (!table) {
      return table.error();
    }
    auto split = fedcore::data::stratified_split(*table, 0.2, o.seed);
    const auto standardizer = fedcore::data::Standardizer::fit(split.train);
    standardizer.apply(split.train);
    standardizer.apply(split.test);
    return TrainTest{std::move(split.train), std::move(split.test)};
  }
  return fedcore::fail(fedcore::errc::invalid_argument,
                       "unknown --data '" + o.data + "' (fashion-mnist, breast-cancer, cifar10)");
}

int run(const Options& o) {
  fedcore::set_compute_threads(o.threads);
  auto data = load_data(o);
  if (!data) {
    std::fprintf(stderr, "fedcore-train: %s\n", data.error().to_string().c_str());
    return 2;
  }
  if (o.train_limit > 0 && o.train_limit < data->train.size()) {
    std::vector<std::size_t> first(o.train_limit);
    for (std::size_t i = 0; i < first.size(); ++i) {
      first[i] = i;
    }
    data->train = data->train.subset(first);
  }
  auto spec = fedcore::model::parse_model_spec(std::string_view(o.model));
  if (spec) {
    spec = fedcore::model::complete_spec(*spec, data->train.sample_shape, data->train.num_classes);
  }
  if (!spec) {
    std::fprintf(stderr, "fedcore-train: %s\n", spec.error().to_string().c_str());
    return 2;
  }
  auto optimizer_config =
      fedcore::model::optimizer_config_from_json({{"kind", o.optimizer},
                                                  {"lr", o.lr},
                                                  {"momentum", o.momentum},
                                                  {"weight_decay", o.weight_decay},
                                                  {"nesterov", o.nesterov}});
  if (!optimizer_config) {
    std::fprintf(stderr, "fedcore-train: %s\n", optimizer_config.error().to_string().c_str());
    return 2;
  }
  auto model = fedcore::model::build_model(*spec);
  if (!model) {
    std::fprintf(stderr, "fedcore-train: %s\n", model.error().to_string().c_str());
    return 2;
  }
  model->initialize(o.seed);
  const auto loss = fedcore::model::loss_for(*spec);
  auto optimizer = fedcore::model::make_optimizer(*optimizer_config, model->param_count());

  std::printf("data: %s, %zu train / %zu test samples of shape %s, %d classes\n", o.data.c_str(),
              data->train.size(), data->test.size(),
              fedcore::model::shape_to_string(data->train.sample_shape).c_str(),
              data->train.num_classes);
  std::printf("model: %s\n%s", nlohmann::json(*spec).dump().c_str(), model->summary().c_str());
  std::printf("training: %d epoch(s), batch %d, %s lr %g momentum %g, %d compute thread(s)\n",
              o.epochs, o.batch, o.optimizer.c_str(), double(o.lr), double(o.momentum),
              fedcore::compute_threads());
  std::fflush(stdout);

  const bool tty = isatty(STDOUT_FILENO) != 0;
  const auto started = std::chrono::steady_clock::now();
  std::size_t next_report = 0;
  fedcore::model::TrainConfig config{.epochs = 1, .batch_size = o.batch, .seed = o.seed};
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    config.seed = o.seed + static_cast<std::uint64_t>(epoch);
    next_report = 0;
    const auto report = fedcore::model::train(
        *model, loss, *optimizer, data->train, config, {},
        [&](const fedcore::model::TrainProgress& p) {
          if (o.quiet || p.samples < next_report) {
            return;
          }
          next_report = p.samples + p.epoch_samples / 10;
          const double elapsed =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
          std::printf("%sepoch %d: %6zu/%zu samples, loss %.4f%s", tty ? "\r" : "", epoch + 1,
                      p.samples, p.epoch_samples, p.mean_loss, tty ? "" : "\n");
          (void)elapsed;
          std::fflush(stdout);
        });
    const auto test = fedcore::model::evaluate(*model, loss, data->test);
    std::printf(
        "%sepoch %d: train loss %.4f, train accuracy %.2f%%, test loss %.4f, test accuracy %.2f%%, "
        "%.0f samples/s (%.1f s)\n",
        tty && !o.quiet ? "\n" : "", epoch + 1, report.loss, 100 * report.accuracy, test.loss,
        100 * test.accuracy, double(report.samples) / report.seconds, report.seconds);
    std::fflush(stdout);
  }
  if (!o.save.empty()) {
    auto saved = fedcore::model::save_params(o.save, model->layout(), model->params(),
                                             nlohmann::json({{"spec", *spec}}).dump());
    if (!saved) {
      std::fprintf(stderr, "fedcore-train: %s\n", saved.error().to_string().c_str());
      return 1;
    }
    std::printf("saved parameters to %s\n", o.save.c_str());
  }
  if (!o.export_npy.empty()) {
    auto exported = fedcore::model::export_npy(o.export_npy, model->layout(), model->params());
    if (!exported) {
      std::fprintf(stderr, "fedcore-train: %s\n", exported.error().to_string().c_str());
      return 1;
    }
    std::printf("exported NumPy arrays to %s/\n", o.export_npy.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedcore-train: centralized training on one machine (the federated runs' baseline)"};
  Options o;
  app.add_option("--data", o.data, "fashion-mnist | breast-cancer | cifar10")
      ->capture_default_str();
  app.add_option("--data-path", o.data_path,
                 "data directory or CSV file (default: the standard location)");
  app.add_option("--model", o.model, R"(model spec JSON, e.g. {"type":"mlp","hidden":[256,128]})")
      ->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "sgd | adam")->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate")->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "L2 weight decay")->capture_default_str();
  app.add_flag("--nesterov", o.nesterov, "Nesterov momentum");
  app.add_option("--epochs", o.epochs, "epochs")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--batch", o.batch, "batch size")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  app.add_option("--seed", o.seed, "seed for initialisation and shuffling")->capture_default_str();
  app.add_option("--threads", o.threads, "compute threads (0 = all cores)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--train-limit", o.train_limit, "use only the first N training samples");
  app.add_option("--save", o.save, "save the trained parameters (Fedcore format) to this file");
  app.add_option("--export-npy", o.export_npy,
                 "export the trained parameters as .npy files to this folder");
  app.add_flag("--quiet", o.quiet, "only the per-epoch lines");
  CLI11_PARSE(app, argc, argv);
  return run(o);
}
