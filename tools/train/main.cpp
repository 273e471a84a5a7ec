// fedcore-train: trains one model centrally on one machine and reports test accuracy and
// throughput. It is the single-node baseline that federated runs are compared with.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <openssl/rand.h>

#include "shared/data/cifar10.hpp"
#include "shared/data/csv.hpp"
#include "shared/data/fashion_mnist.hpp"
#include "shared/data/normalize.hpp"
#include "shared/data/split.hpp"
#include "shared/model/dp_sgd.hpp"
#include "shared/model/federated_vector.hpp"
#include "shared/model/model.hpp"
#include "shared/model/param_io.hpp"
#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"
#include "shared/privacy/noise_source.hpp"
#include "shared/privacy/rdp_accountant.hpp"
#include "shared/util/source_tree.hpp"
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
  std::int64_t augment_crop = 0;
  bool augment_flip = false;
  std::string save;
  std::string export_npy;
  bool quiet = false;
  // DP-SGD: on when dp_clip > 0; z from dp_noise, or the smallest z for dp_epsilon.
  double dp_clip = 0;
  double dp_noise = 0;
  double dp_epsilon = 0;
  double dp_delta = 1e-5;
  bool dp_per_record = false;  // force one forward/backward per record (for comparison)
};

// DP-SGD's randomness: noise from OpenSSL's private CSPRNG; Poisson sampling from an Rng
// whose seed comes from the same CSPRNG and is never shown (a uniform CSPRNG source
// belongs in shared/privacy; client/dp_noise.hpp has one for the sites).
struct DpSources {
  fedcore::privacy::CryptoNormal normal;
  fedcore::Rng sampler{0};

  fedcore::result<void> seed() {
    std::uint64_t secret = 0;
    if (RAND_priv_bytes(reinterpret_cast<unsigned char*>(&secret), sizeof secret) != 1) {
      return fedcore::fail(fedcore::errc::unavailable, "RAND_priv_bytes failed");
    }
    sampler = fedcore::Rng(secret);
    return {};
  }
  fedcore::model::DpRandom random() {
    return {[this](std::span<double> out) { return normal.fill_standard_normal(out); },
            [this](std::span<double> out) -> fedcore::result<void> {
              for (double& u : out) {
                u = sampler.uniform_double();
              }
              return {};
            }};
  }
};

// The noise multiplier to train with: --dp-noise, or the smallest z whose epsilon over all
// epochs (Poisson-sampled Gaussian, RDP accountant) is at most --dp-epsilon.
fedcore::result<double> dp_noise_multiplier(const Options& o, std::size_t records) {
  if (o.dp_noise > 0) {
    return o.dp_noise;
  }
  if (o.dp_epsilon <= 0) {
    return fedcore::fail(fedcore::errc::invalid_argument,
                         "--dp-clip needs --dp-noise z or --dp-epsilon E");
  }
  const double q = std::min(1.0, double(o.batch) / double(records));
  const auto steps =
      fedcore::model::dp_sgd_steps_per_epoch(records, o.batch) * static_cast<std::size_t>(o.epochs);
  return fedcore::privacy::noise_multiplier_for(o.dp_epsilon, o.dp_delta, q, steps,
                                                fedcore::privacy::default_orders());
}

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
                                 ? fedcore::source_path("data/breast_cancer_wisconsin.csv")
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

  const bool dp = o.dp_clip > 0;
  if (!model->state().empty() && dp) {
    std::fprintf(stderr,
                 "fedcore-train: DP-SGD clips each example's gradient, and BatchNorm mixes the "
                 "examples of a batch: a model with BatchNorm cannot train with --dp-clip\n");
    return 2;
  }
  if ((o.augment_crop > 0 || o.augment_flip) && data->train.sample_shape.size() != 3) {
    std::fprintf(stderr, "fedcore-train: --augment-crop and --augment-flip need images\n");
    return 2;
  }
  if (!dp && (o.dp_noise > 0 || o.dp_epsilon > 0)) {
    std::fprintf(stderr, "fedcore-train: --dp-noise and --dp-epsilon need --dp-clip\n");
    return 2;
  }
  double dp_z = 0;
  DpSources dp_sources;
  std::optional<fedcore::privacy::RdpAccountant> accountant;
  if (dp) {
    auto z = dp_noise_multiplier(o, data->train.size());
    auto seeded = z ? dp_sources.seed() : fedcore::result<void>(z.error());
    auto created = seeded ? fedcore::privacy::RdpAccountant::create()
                          : fedcore::result<fedcore::privacy::RdpAccountant>(seeded.error());
    if (!created) {
      std::fprintf(stderr, "fedcore-train: %s\n", created.error().to_string().c_str());
      return 2;
    }
    dp_z = *z;
    accountant = std::move(*created);
    std::printf(
        "DP-SGD: clip %g, noise multiplier %.4f, expected batch %d (q = %.6f), %zu steps "
        "per epoch, delta %g\n",
        o.dp_clip, dp_z, o.batch, std::min(1.0, double(o.batch) / double(data->train.size())),
        fedcore::model::dp_sgd_steps_per_epoch(data->train.size(), o.batch), o.dp_delta);
  }

  const bool tty = isatty(STDOUT_FILENO) != 0;
  const auto started = std::chrono::steady_clock::now();
  std::size_t next_report = 0;
  fedcore::model::TrainConfig config{.epochs = 1, .batch_size = o.batch, .seed = o.seed};
  config.augmentation = {o.augment_crop, o.augment_flip};
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    config.seed = o.seed + static_cast<std::uint64_t>(epoch);
    next_report = 0;
    if (dp) {
      const auto report = fedcore::model::train_dp_sgd(*model, loss, *optimizer, data->train,
                                                       {.epochs = 1,
                                                        .expected_batch = o.batch,
                                                        .clip_norm = o.dp_clip,
                                                        .noise_multiplier = dp_z,
                                                        .batched_per_example = !o.dp_per_record},
                                                       dp_sources.random());
      if (!report) {
        std::fprintf(stderr, "fedcore-train: %s\n", report.error().to_string().c_str());
        return 1;
      }
      auto composed =
          accountant->compose_poisson_gaussian(report->sampling_rate, dp_z, report->steps);
      const auto spent = composed
                             ? accountant->epsilon(o.dp_delta)
                             : fedcore::result<fedcore::privacy::EpsilonAtOrder>(composed.error());
      const auto test = fedcore::model::evaluate(*model, loss, data->test);
      std::printf(
          "epoch %d: DP-SGD train loss %.4f, test loss %.4f, test accuracy %.2f%%, epsilon %.3f "
          "at delta %g, %zu of %zu records clipped, %.0f samples/s (%.1f s, %s per-example "
          "gradients)\n",
          epoch + 1, report->loss, test.loss, 100 * test.accuracy, spent ? spent->epsilon : -1.0,
          o.dp_delta, report->clipped, report->samples, double(report->samples) / report->seconds,
          report->seconds, report->batched ? "batched" : "per-record");
      std::fflush(stdout);
      continue;
    }
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
    // The parameters then the BatchNorm statistics, if any: the layout a federated run's
    // checkpoint of this spec has, so either loads where the other does.
    auto saved = fedcore::model::save_params(o.save, fedcore::model::federated_layout(*model),
                                             fedcore::model::federated_values(*model),
                                             nlohmann::json({{"spec", *spec}}).dump());
    if (!saved) {
      std::fprintf(stderr, "fedcore-train: %s\n", saved.error().to_string().c_str());
      return 1;
    }
    std::printf("saved parameters to %s\n", o.save.c_str());
  }
  if (!o.export_npy.empty()) {
    auto exported =
        fedcore::model::export_npy(o.export_npy, fedcore::model::federated_layout(*model),
                                   fedcore::model::federated_values(*model));
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
  app.add_option("--augment-crop", o.augment_crop,
                 "random crop with this much zero padding per side (images; 0 = off)")
      ->check(CLI::Range(0, 16));
  app.add_flag("--augment-flip", o.augment_flip, "random horizontal flip (images)");
  app.add_option("--save", o.save, "save the trained parameters (Fedcore format) to this file");
  app.add_option("--export-npy", o.export_npy,
                 "export the trained parameters as .npy files to this folder");
  app.add_flag("--quiet", o.quiet, "only the per-epoch lines");
  app.add_option("--dp-clip", o.dp_clip,
                 "train with DP-SGD, clipping each example's gradient to this L2 norm; --batch "
                 "is the expected (Poisson) batch")
      ->check(CLI::PositiveNumber);
  app.add_option("--dp-noise", o.dp_noise, "DP-SGD noise multiplier z (noise std z * clip)")
      ->check(CLI::PositiveNumber);
  app.add_option("--dp-epsilon", o.dp_epsilon,
                 "DP-SGD: the smallest noise multiplier that spends at most this epsilon over "
                 "all epochs (RDP accountant)")
      ->check(CLI::PositiveNumber)
      ->excludes("--dp-noise");
  app.add_flag("--dp-per-record", o.dp_per_record,
               "DP-SGD: per-example gradients one record at a time even where the batched "
               "path applies (to compare their cost)");
  app.add_option("--dp-delta", o.dp_delta, "DP-SGD delta")
      ->capture_default_str()
      ->check(CLI::Range(1e-12, 0.1));
  CLI11_PARSE(app, argc, argv);
  return run(o);
}
