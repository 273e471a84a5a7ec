// Training on real data: these tests fail if the layers, losses, optimizers or loaders
// are wrong in any way that matters for learning.
#include <filesystem>
#include <numeric>

#include <gtest/gtest.h>

#include "shared/data/csv.hpp"
#include "shared/data/fashion_mnist.hpp"
#include "shared/data/normalize.hpp"
#include "shared/data/split.hpp"
#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"
#include "shared/util/source_tree.hpp"
#include "shared/util/threads.hpp"

namespace fedcore::model {
namespace {

Model build(const char* json, const data::Dataset& data) {
  auto spec =
      complete_spec(*parse_model_spec(std::string_view(json)), data.sample_shape, data.num_classes);
  EXPECT_TRUE(spec) << spec.error().to_string();
  auto model = build_model(*spec);
  model->initialize(1);
  return std::move(*model);
}

data::Dataset first(const data::Dataset& d, std::size_t n) {
  std::vector<std::size_t> indices(std::min(n, d.size()));
  std::iota(indices.begin(), indices.end(), std::size_t{0});
  return d.subset(indices);
}

const data::TrainTest* fashion_mnist() {
  static const auto loaded = data::load_fashion_mnist();
  return loaded ? &*loaded : nullptr;
}

TEST(Training, LogregOnBreastCancerReaches95PercentTestAccuracy) {
  set_compute_threads(1);
  auto table = data::load_csv(fedcore::source_path("data/breast_cancer_wisconsin.csv"),
                              {.label_column = "benign"});
  ASSERT_TRUE(table) << table.error().to_string();
  auto split = data::stratified_split(*table, 0.25, 7);
  const auto standardizer = data::Standardizer::fit(split.train);
  standardizer.apply(split.train);
  standardizer.apply(split.test);
  Model model = build(R"({"type":"logreg"})", split.train);
  auto sgd = make_optimizer({.learning_rate = 0.1f}, model.param_count());
  train(model, LossKind::binary_cross_entropy, *sgd, split.train,
        {.epochs = 30, .batch_size = 16, .seed = 1});
  const auto test = evaluate(model, LossKind::binary_cross_entropy, split.test);
  EXPECT_EQ(test.samples, 142u);  // round(0.25 * 212) + round(0.25 * 357)
  EXPECT_GE(test.accuracy, 0.95) << "test loss " << test.loss;
}

TEST(Training, MlpOnFashionMnistSubsetBeatsTheThreshold) {
  const auto* fmnist = fashion_mnist();
  if (fmnist == nullptr) {
    GTEST_SKIP() << "Fashion-MNIST not installed (scripts/setup.sh installs dataset-fashion-mnist)";
  }
  set_compute_threads(0);
  const auto train_set = first(fmnist->train, 10000);
  const auto& test_set = fmnist->test;
  Model model = build(R"({"type":"mlp","hidden":[256,128]})", train_set);
  auto sgd = make_optimizer({.learning_rate = 0.05f, .momentum = 0.9f}, model.param_count());
  const auto before = evaluate(model, LossKind::softmax_cross_entropy, test_set);
  train(model, LossKind::softmax_cross_entropy, *sgd, train_set,
        {.epochs = 2, .batch_size = 32, .seed = 1});
  const auto after = evaluate(model, LossKind::softmax_cross_entropy, test_set);
  // Threshold 0.75 on the 10k test images. Chance is 0.10 and the untrained net sits
  // near it. PyTorch 1.13 with the same network, Glorot init, first 10k samples, batch
  // 32, SGD lr 0.05 momentum 0.9 and 2 epochs reaches 0.76 (measured 2026-11-21); this
  // implementation reaches 0.79-0.81 across seeds. A wrong gradient, loss or loader
  // lands far below 0.75.
  EXPECT_LT(before.accuracy, 0.3);
  EXPECT_GE(after.accuracy, 0.75) << "test loss " << after.loss;
}

TEST(Training, CnnDrivesTheLossOfOneSmallBatchNearZero) {
  const auto* fmnist = fashion_mnist();
  if (fmnist == nullptr) {
    GTEST_SKIP() << "Fashion-MNIST not installed (scripts/setup.sh installs dataset-fashion-mnist)";
  }
  set_compute_threads(0);
  const auto batch = first(fmnist->train, 16);
  Model model = build(R"({"type":"cnn"})", batch);
  auto sgd = make_optimizer({.learning_rate = 0.05f, .momentum = 0.9f}, model.param_count());
  const double initial = evaluate(model, LossKind::softmax_cross_entropy, batch).loss;
  train(model, LossKind::softmax_cross_entropy, *sgd, batch,
        {.epochs = 60, .batch_size = 16, .seed = 1});
  const auto final_eval = evaluate(model, LossKind::softmax_cross_entropy, batch);
  EXPECT_GT(initial, 1.5);
  EXPECT_LT(final_eval.loss, 0.01);
  EXPECT_EQ(final_eval.accuracy, 1.0);
}

TEST(Training, IsBitForBitReproducibleOnOneThread) {
  set_compute_threads(1);
  auto table = data::load_csv(fedcore::source_path("data/breast_cancer_wisconsin.csv"),
                              {.label_column = "benign"});
  ASSERT_TRUE(table);
  auto run = [&] {
    Model model = build(R"({"type":"mlp","hidden":[8],"dropout":0.2})", *table);
    auto adam =
        make_optimizer({.kind = OptimizerKind::adam, .learning_rate = 0.01f}, model.param_count());
    train(model, LossKind::binary_cross_entropy, *adam, *table,
          {.epochs = 2, .batch_size = 32, .seed = 5});
    return std::vector<float>(model.params().begin(), model.params().end());
  };
  EXPECT_EQ(run(), run());
}

TEST(Training, ProximalTermKeepsWeightsNearTheAnchor) {
  set_compute_threads(1);
  auto table = data::load_csv(fedcore::source_path("data/breast_cancer_wisconsin.csv"),
                              {.label_column = "benign"});
  ASSERT_TRUE(table);
  data::Standardizer::fit(*table).apply(*table);
  auto distance_after = [&](float mu) {
    Model model = build(R"({"type":"logreg"})", *table);
    const std::vector<float> anchor(model.params().begin(), model.params().end());
    auto sgd = make_optimizer({.learning_rate = 0.1f}, model.param_count());
    train(model, LossKind::binary_cross_entropy, *sgd, *table,
          {.epochs = 5, .batch_size = 16, .seed = 1, .proximal_mu = mu}, anchor);
    double d = 0;
    for (std::size_t i = 0; i < anchor.size(); ++i) {
      d += (model.params()[i] - anchor[i]) * (model.params()[i] - anchor[i]);
    }
    return d;
  };
  EXPECT_LT(distance_after(1.0f), 0.5 * distance_after(0.0f));
}

}  // namespace
}  // namespace fedcore::model
