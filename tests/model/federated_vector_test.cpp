// The vector federated rounds carry (shared/model/federated_vector.hpp): parameters then
// BatchNorm state, FedBN's site ranges, and the cnn's "batch_norm" option that makes a small
// model with both.
#include "shared/model/federated_vector.hpp"

#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shared/model/mobilenet_v2.hpp"
#include "shared/model/model.hpp"
#include "shared/model/param_io.hpp"
#include "shared/model/spec.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::model {
namespace {

Model cnn_with_batch_norm() {
  auto spec = parse_model_spec(nlohmann::json{{"type", "cnn"},
                                              {"input_shape", {8, 8, 1}},
                                              {"num_classes", 3},
                                              {"channels", {4, 5}},
                                              {"kernel", 3},
                                              {"dense", 6},
                                              {"batch_norm", true}});
  EXPECT_TRUE(spec) << spec.error().message;
  auto built = build_model(*spec);
  EXPECT_TRUE(built) << built.error().message;
  built->initialize(3);
  return std::move(*built);
}

TEST(CnnSpec, BatchNormIsAnOptionOfTheCnnOnly) {
  const auto model = cnn_with_batch_norm();
  // conv1 (no bias), bn1, conv2 (no bias), bn2, fc1, fc2.
  std::vector<std::string> names;
  for (const auto& e : model.layout().entries()) {
    names.push_back(e.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias",
                                             "conv2.weight", "bn2.weight", "bn2.bias", "fc1.weight",
                                             "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(model.state().size(), 2u * (4 + 5));

  auto spec = parse_model_spec(nlohmann::json{{"type", "cnn"}, {"batch_norm", true}});
  ASSERT_TRUE(spec);
  EXPECT_TRUE(has_batch_norm(*spec));
  EXPECT_EQ(nlohmann::json(*spec)["batch_norm"], true);
  EXPECT_TRUE(parse_model_spec(nlohmann::json(*spec))->batch_norm);
  auto plain = parse_model_spec(nlohmann::json{{"type", "cnn"}});
  EXPECT_FALSE(has_batch_norm(*plain));
  EXPECT_FALSE(nlohmann::json(*plain).contains("batch_norm"));  // the spec older sites know
  EXPECT_TRUE(has_batch_norm(*parse_model_spec(nlohmann::json{{"type", "mobilenetv2"}})));

  auto refused =
      parse_model_spec(nlohmann::json{{"type", "mlp"}, {"hidden", {4}}, {"batch_norm", true}});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("'batch_norm' applies only to a cnn"), std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(parse_model_spec(nlohmann::json{{"type", "cnn"}, {"batch_norm", 1}}));
}

TEST(FederatedVector, IsTheParametersThenTheState) {
  auto model = cnn_with_batch_norm();
  const auto layout = federated_layout(model);
  ASSERT_EQ(layout.total(), federated_size(model));
  EXPECT_EQ(layout.total(), model.param_count() + model.state().size());
  const auto& last = layout.entries().back();
  EXPECT_EQ(last.name, "bn2.running_var");
  EXPECT_EQ(last.offset + last.size, layout.total());
  EXPECT_EQ(layout.entries()[model.layout().entries().size()].name, "bn1.running_mean");

  auto values = federated_values(model);
  ASSERT_EQ(values.size(), layout.total());
  EXPECT_EQ(values[model.param_count() + 4], 1.0f);  // bn1's running variance starts at 1
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = 0.5f + float(i);
  }
  load_federated(model, values);
  EXPECT_EQ(model.params()[0], 0.5f);
  EXPECT_EQ(model.state()[0], 0.5f + float(model.param_count()));
  EXPECT_EQ(federated_values(model), values);

  // A model without state: the vector and layout are the parameters' own (old runs keep
  // their fingerprints and checkpoints).
  auto plain = build_model(*parse_model_spec(
      nlohmann::json{{"type", "cnn"}, {"input_shape", {8, 8, 1}}, {"num_classes", 3}}));
  EXPECT_EQ(federated_layout(*plain), plain->layout());
  EXPECT_TRUE(site_ranges(*plain).empty());
  EXPECT_EQ(layout_of(*parse_model_spec(nlohmann::json{{"type", "cnn"},
                                                       {"input_shape", {8, 8, 1}},
                                                       {"num_classes", 3},
                                                       {"channels", {4, 5}},
                                                       {"kernel", 3},
                                                       {"dense", 6},
                                                       {"batch_norm", true}}))
                ->fingerprint(),
            layout.fingerprint());
}

TEST(FederatedVector, SiteRangesAreEveryBatchNormWeightBiasAndTheState) {
  const auto model = cnn_with_batch_norm();
  const auto ranges = site_ranges(model);
  const auto& layout = model.layout();
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[0], (ValueRange{layout.find("bn1.weight")->offset, 8}));
  EXPECT_EQ(ranges[1], (ValueRange{layout.find("bn2.weight")->offset, 10}));
  EXPECT_EQ(ranges[2], (ValueRange{model.param_count(), model.state().size()}));
  EXPECT_EQ(total_size(ranges), 18u + 18u);

  std::vector<float> values(federated_size(model));
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = float(i);
  }
  const auto packed = gather_ranges(values, ranges);
  ASSERT_EQ(packed.size(), total_size(ranges));
  EXPECT_EQ(packed[0], float(ranges[0].offset));
  EXPECT_EQ(packed[8], float(ranges[1].offset));
  std::vector<float> other(values.size(), -1.0f);
  scatter_ranges(packed, other, ranges);
  EXPECT_EQ(gather_ranges(other, ranges), packed);
  EXPECT_EQ(other[0], -1.0f);  // conv1's weight is shared, not the site's

  // MobileNetV2 marks the BatchNorm layers inside its blocks too (every "..._bn." entry).
  auto mobile = build_model(*parse_model_spec(nlohmann::json{{"type", "mobilenetv2"},
                                                             {"width", 0.25},
                                                             {"input_shape", {32, 32, 3}},
                                                             {"num_classes", 10}}));
  ASSERT_TRUE(mobile);
  std::size_t bn_params = 0;
  for (const auto& e : mobile->layout().entries()) {
    if (e.name.find("bn.") != std::string::npos) {
      bn_params += e.size;
    }
  }
  ASSERT_GT(bn_params, 0u);
  EXPECT_EQ(total_size(site_ranges(*mobile)), bn_params + mobile->state().size());
}

TEST(FederatedVector, ACheckpointOfTheVectorLoadsIntoAModel) {
  fedcore::testing::TempDir dir;
  auto model = cnn_with_batch_norm();
  auto values = federated_values(model);
  values.back() = 7.0f;
  const auto path = dir.path("round.fcp");
  ASSERT_TRUE(save_params(path, federated_layout(model), values));
  auto other = cnn_with_batch_norm();
  ASSERT_TRUE(load_params_into(path, other));
  EXPECT_EQ(other.state().back(), 7.0f);
  EXPECT_EQ(federated_values(other), values);
}

}  // namespace
}  // namespace fedcore::model
