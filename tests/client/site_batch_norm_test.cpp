// FedBN at the site: local training and evaluation with the site's own BatchNorm
// (client/site_batch_norm.hpp), and the averaged mode that sends the statistics along.
#include "client/site_batch_norm.hpp"

#include <fstream>

#include <gtest/gtest.h>

#include "client/local_evaluator.hpp"
#include "client/local_trainer.hpp"
#include "shared/model/federated_vector.hpp"
#include "shared/model/param_io.hpp"
#include "shared/model/trainer.hpp"
#include "tests/client/client_test_support.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::client {
namespace {

// 32 grey 6x6 images, two classes: the bright half is the top (class 1) or the bottom.
data::TrainTest tiny_images() {
  data::Dataset d;
  d.sample_shape = {6, 6, 1};
  d.num_classes = 2;
  d.features.resize(36, 32);
  for (int i = 0; i < 32; ++i) {
    const int label = i % 2;
    for (int y = 0; y < 6; ++y) {
      for (int x = 0; x < 6; ++x) {
        const bool bright = label == 1 ? y < 3 : y >= 3;
        d.features(y * 6 + x, i) = (bright ? 2.0f : 0.5f) + 0.05f * float((i * 7 + x * 3 + y) % 5);
      }
    }
    d.labels.push_back(label);
  }
  data::TrainTest out;
  out.test = d.subset(std::vector<std::size_t>{0, 1, 2, 3, 4, 5});
  out.train = std::move(d);
  return out;
}

struct AnnouncedBn {
  nlohmann::json spec;
  model::Model model;
  std::vector<model::ValueRange> ranges;
  std::string fingerprint;
  std::vector<float> global;
};

AnnouncedBn announced_bn() {
  const nlohmann::json spec = {
      {"type", "cnn"}, {"channels", {3}}, {"kernel", 3}, {"dense", 4}, {"batch_norm", true}};
  auto built =
      model::build_model(*model::complete_spec(*model::parse_model_spec(spec), {6, 6, 1}, 2));
  AnnouncedBn a{spec, std::move(*built), {}, {}, {}};
  a.model.initialize(11);
  a.ranges = model::site_ranges(a.model);
  a.fingerprint = model::federated_layout(a.model).fingerprint_hex();
  a.global = model::federated_values(a.model);
  return a;
}

protocol::TrainRequest request_for(const AnnouncedBn& a, bool site_batch_norm) {
  testing::Announced plain;
  plain.spec = a.spec;
  plain.fingerprint = a.fingerprint;
  auto r = testing::train_request(plain, 1);
  r.settings.optimizer = {{"kind", "sgd"}, {"lr", 0.1}};
  r.site_batch_norm = site_batch_norm;
  return r;
}

std::vector<float> values_in(const std::vector<float>& v,
                             const std::vector<model::ValueRange>& ranges) {
  return model::gather_ranges(v, ranges);
}

TEST(SiteBatchNorm, TheCnnOptionGivesBatchNormRangesTheUpdateDoesNotCarry) {
  const auto data = tiny_images();
  const auto a = announced_bn();
  // conv1 has no bias with BatchNorm; bn1's weight and bias follow it, the state is last.
  ASSERT_EQ(a.ranges.size(), 2u);
  EXPECT_EQ(a.ranges[0].size, 6u);
  EXPECT_EQ(a.ranges[1], (model::ValueRange{a.model.param_count(), 6}));

  const auto out = train_locally(request_for(a, true), a.global, data, 1);
  ASSERT_FALSE(out.failure) << out.failure->message;
  ASSERT_EQ(out.params.size(), a.global.size());
  // The BatchNorm values that leave are the global model's, bit for bit ...
  EXPECT_EQ(values_in(out.params, a.ranges), values_in(a.global, a.ranges));
  // ... while the site's own moved: trained weights and tracked statistics.
  ASSERT_EQ(out.site_values.size(), model::total_size(a.ranges));
  EXPECT_NE(out.site_values, values_in(a.global, a.ranges));
  // The shared layers trained.
  EXPECT_NE(out.params, a.global);
}

TEST(SiteBatchNorm, AveragedModeSendsTheTrainedStatistics) {
  const auto data = tiny_images();
  const auto a = announced_bn();
  const auto out = train_locally(request_for(a, false), a.global, data, 1);
  ASSERT_FALSE(out.failure) << out.failure->message;
  EXPECT_TRUE(out.site_values.empty());
  const std::vector<model::ValueRange> state{{a.model.param_count(), 6}};
  const auto sent = values_in(out.params, state);
  EXPECT_NE(sent, values_in(a.global, state));
  // The running means start at 0 and the variances at 1; one epoch of momentum-0.1
  // updates moves both.
  for (std::size_t c = 0; c < 3; ++c) {
    EXPECT_GT(std::abs(sent[c]), 1e-3) << "running_mean " << c;
    EXPECT_NE(sent[3 + c], 1.0f) << "running_var " << c;
  }
}

TEST(SiteBatchNorm, ASecondRoundStartsFromTheSitesValuesAndEvaluatesWithThem) {
  const auto data = tiny_images();
  const auto a = announced_bn();
  auto first = train_locally(request_for(a, true), a.global, data, 1);
  ASSERT_FALSE(first.failure);
  // What the site would evaluate: the global model with its own BatchNorm in place.
  auto expected_values = a.global;
  model::scatter_ranges(first.site_values, expected_values, a.ranges);
  auto expected_model = a.model;
  model::load_federated(expected_model, expected_values);
  const auto expected =
      model::evaluate(expected_model, model::LossKind::binary_cross_entropy, data.test);

  protocol::EvaluateRequest eval;
  eval.run_id = 3;
  eval.round = 1;
  eval.model_spec = a.spec;
  eval.layout_fingerprint = a.fingerprint;
  eval.site_batch_norm = true;
  const auto with_site = evaluate_locally(eval, a.global, data, 1, first.site_values);
  ASSERT_TRUE(with_site) << with_site.error().message;
  EXPECT_DOUBLE_EQ(with_site->loss, std::min(expected.loss, 1e9));
  const auto without = evaluate_locally(eval, a.global, data, 1);
  ASSERT_TRUE(without);
  EXPECT_NE(without->loss, with_site->loss);

  // Training again from the site's values differs from training from the global model's.
  const auto again =
      train_locally(request_for(a, true), a.global, data, 1, std::nullopt, {}, first.site_values);
  ASSERT_FALSE(again.failure);
  EXPECT_NE(again.site_values, first.site_values);
  EXPECT_NE(again.params, first.params);
  EXPECT_EQ(values_in(again.params, a.ranges), values_in(a.global, a.ranges));
}

TEST(SiteBatchNorm, RefusesWhatItCannotHonourWithAReason) {
  const auto a = announced_bn();
  // FedBN for a model without BatchNorm.
  const auto logreg = testing::announced_logreg();
  auto request = testing::train_request(logreg, 1);
  request.site_batch_norm = true;
  auto out = train_locally(request, logreg.global, testing::tiny_data(), 1);
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->code, errc::invalid_argument);
  EXPECT_NE(out.failure->message.find("no BatchNorm"), std::string::npos);
  // DP-SGD through BatchNorm.
  auto dp = request_for(a, false);
  dp.privacy.dp = protocol::DpMode::record;
  dp.privacy.clip_norm = 1;
  dp.privacy.noise_multiplier = 1;
  out = train_locally(dp, a.global, tiny_images(), 1);
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->code, errc::invalid_argument);
  EXPECT_NE(out.failure->message.find("BatchNorm"), std::string::npos);
  // A payload of the parameters alone (a server that drops the statistics).
  const std::vector<float> params_only(
      a.global.begin(), a.global.begin() + static_cast<std::ptrdiff_t>(a.model.param_count()));
  out = train_locally(request_for(a, true), params_only, tiny_images(), 1);
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->code, errc::failed_precondition);
}

TEST(SiteBatchNorm, SwapsTheSitesValuesInAndTheGlobalOnesBack) {
  const std::vector<float> global{0, 1, 2, 3, 4, 5};
  const std::vector<model::ValueRange> ranges{{1, 2}, {5, 1}};
  // The first round: no values of its own yet, the global model's.
  EXPECT_EQ(with_site_values(global, ranges, {}), global);
  EXPECT_EQ(with_site_values(global, ranges, std::vector<float>{9, 9}), global);  // wrong size
  const std::vector<float> site{10, 11, 15};
  EXPECT_EQ(with_site_values(global, ranges, site), (std::vector<float>{0, 10, 11, 3, 4, 15}));
  std::vector<float> trained{7, 20, 21, 7, 7, 25};
  EXPECT_EQ(take_site_values(global, trained, ranges), (std::vector<float>{20, 21, 25}));
  EXPECT_EQ(trained, (std::vector<float>{7, 1, 2, 7, 7, 5}));
  // An external model's spec must mark what FedBN keeps.
  const nlohmann::json marked = {
      {"type", "external"},
      {"layout",
       {{"tensors",
         {{{"name", "w"}, {"shape", {3}}},
          {{"name", "bn.weight"}, {"shape", {2}}, {"normalization", true}}}}}}};
  auto found = external_site_ranges(marked);
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(*found, (std::vector<model::ValueRange>{{3, 2}}));
  auto unmarked = marked;
  unmarked["layout"]["tensors"][1].erase("normalization");
  auto refused = external_site_ranges(unmarked);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("marks no tensor"), std::string::npos);
}

TEST(SiteBatchNorm, AFileKeepsTheValuesAcrossARestartAndAForeignFileStopsTheStart) {
  fedcore::testing::TempDir dir;
  const auto path = dir.path("site-batch-norm.fcp");
  {
    SiteBatchNorm kept;
    ASSERT_TRUE(kept.persist_to(path));  // no file yet: an empty start
    EXPECT_TRUE(kept.of(8).empty());
    ASSERT_TRUE(kept.keep(8, {0.5f, -2.0f, 3.0f}));
  }
  SiteBatchNorm restarted;
  ASSERT_TRUE(restarted.persist_to(path));
  EXPECT_EQ(restarted.of(8), (std::vector<float>{0.5f, -2.0f, 3.0f}));
  EXPECT_TRUE(restarted.of(9).empty());
  ASSERT_TRUE(restarted.keep(9, {1.0f}));
  SiteBatchNorm again;
  ASSERT_TRUE(again.persist_to(path));
  EXPECT_EQ(again.of(9), std::vector<float>{1.0f});

  // A parameter file of something else, and a damaged file: refused, left as they are.
  const auto foreign = dir.path("model.fcp");
  model::ParamLayout layout;
  layout.append("w", {2});
  ASSERT_TRUE(model::save_params(foreign, layout, std::vector<float>{1, 2}));
  SiteBatchNorm refused;
  auto opened = refused.persist_to(foreign);
  ASSERT_FALSE(opened);
  EXPECT_NE(opened.error().message.find("not this site's BatchNorm"), std::string::npos);
  {
    std::ofstream damaged(path, std::ios::binary | std::ios::in | std::ios::out);
    damaged.seekp(40);
    damaged.put('\x7f');
  }
  opened = refused.persist_to(path);
  ASSERT_FALSE(opened);
  EXPECT_NE(opened.error().message.find(path), std::string::npos);
}

TEST(SiteBatchNorm, KeepsOneRunsValues) {
  SiteBatchNorm kept;
  EXPECT_TRUE(kept.of(4).empty());
  ASSERT_TRUE(kept.keep(4, {1.0f, 2.0f}));
  EXPECT_EQ(kept.of(4), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_TRUE(kept.of(5).empty());
  ASSERT_TRUE(kept.keep(5, {3.0f}));
  EXPECT_TRUE(kept.of(4).empty());
  EXPECT_EQ(kept.of(5), std::vector<float>{3.0f});
}

}  // namespace
}  // namespace fedcore::client
