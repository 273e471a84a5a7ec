// SCAFFOLD at the site (client/control_variates.hpp): option II's change of the control
// variate against a hand-computed value, c_i kept per run across rounds, and the trainer's
// correction term moving a plain SGD step by exactly lr * (c - c_i).
#include "client/control_variates.hpp"

#include <gtest/gtest.h>

#include "shared/data/dataset.hpp"
#include "shared/model/optimizer.hpp"
#include "shared/model/spec.hpp"
#include "shared/model/trainer.hpp"

namespace fedcore::client {
namespace {

// x = (1, 2), y = (0.8, 2.1), c = (0.1, -0.2), K = 2 steps at lr 0.1:
// (x - y) / (K lr) = (0.2, -0.1) / 0.2 = (1, -0.5); minus c: (0.9, -0.3).
TEST(ControlVariates, ChangeIsOptionTwoOfThePaper) {
  const std::vector<float> x{1, 2}, y{0.8f, 2.1f}, c{0.1f, -0.2f};
  std::vector<float> change(2);
  control_variate_change(x, y, c, 2, 0.1, change);
  EXPECT_NEAR(change[0], 0.9f, 1e-6);
  EXPECT_NEAR(change[1], -0.3f, 1e-6);
}

TEST(ControlVariates, KeepsTheSitesVariatePerRunAcrossRounds) {
  ControlVariates mine;
  const std::vector<float> c{1, 2, 3};
  EXPECT_EQ(mine.correction(7, c), c);  // c_i starts at zero
  mine.advance(7, std::vector<float>{0.5f, 0, -1});
  EXPECT_EQ(mine.correction(7, c), (std::vector<float>{0.5f, 2, 4}));
  mine.advance(7, std::vector<float>{0.5f, 1, 0});  // a second round adds to c_i
  EXPECT_EQ(mine.of(7), (std::vector<float>{1, 1, -1}));
  EXPECT_EQ(mine.correction(8, c), c);  // another run starts from zero
  EXPECT_EQ(mine.correction(7, std::vector<float>{1, 1}), (std::vector<float>{1, 1}));  // size
  mine.advance(8, std::vector<float>{1, 1, 1});  // one run is kept: the latest
  EXPECT_TRUE(mine.of(7).empty());
  EXPECT_EQ(mine.of(8), (std::vector<float>{1, 1, 1}));
}

// One plain SGD step from the same parameters on the same batch: with a correction v the
// parameters end exactly lr * v lower than without (w - lr (g + v)).
TEST(ControlVariates, TrainerAddsTheCorrectionToEveryGradient) {
  auto spec = model::complete_spec(
      *model::parse_model_spec(std::string_view(R"({"type":"logreg"})")), {3}, 2);
  ASSERT_TRUE(spec);
  data::Dataset d;
  d.sample_shape = {3};
  d.num_classes = 2;
  d.features = Eigen::MatrixXf(3, 4);  // one column per sample
  d.features << 1, 0, 2, -1, 0, 1, 2, 0, 2, 1, 0, 1;
  d.labels = {0, 1, 1, 0};
  const auto train_once = [&](std::span<const float> correction) {
    auto m = model::build_model(*spec);
    m->initialize(4);
    model::OptimizerConfig sgd;
    sgd.learning_rate = 0.5f;
    auto optimizer = model::make_optimizer(sgd, m->param_count());
    model::TrainConfig config;
    config.batch_size = 4;
    config.max_steps = 1;
    config.gradient_correction = correction;
    (void)model::train(*m, model::loss_for(*spec), *optimizer, d, config);
    return std::vector<float>(m->params().begin(), m->params().end());
  };
  const auto plain = train_once({});
  std::vector<float> v(plain.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = 0.1f * static_cast<float>(i + 1);
  }
  const auto corrected = train_once(v);
  ASSERT_EQ(corrected.size(), plain.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_NEAR(corrected[i], plain[i] - 0.5f * v[i], 1e-6) << "parameter " << i;
  }
}

}  // namespace
}  // namespace fedcore::client
