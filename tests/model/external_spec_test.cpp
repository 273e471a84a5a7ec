// External models in the model spec (shared/model/spec.hpp): a layout Fedcore aggregates
// without building, its strict parsing, and the seeded default start.
#include <cmath>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shared/model/federated_vector.hpp"
#include "shared/model/model.hpp"
#include "shared/model/spec.hpp"

namespace fedcore::model {
namespace {

nlohmann::json torch_like_spec() {
  return nlohmann::json::parse(R"({"type": "external", "input_shape": [28, 28, 1],
    "num_classes": 10, "layout": {"tensors": [
      {"name": "conv1.weight", "shape": [6, 1, 5, 5]}, {"name": "conv1.bias", "shape": [6]},
      {"name": "bn1.weight", "shape": [6]}, {"name": "bn1.bias", "shape": [6]},
      {"name": "bn1.running_mean", "shape": [6]}, {"name": "bn1.running_var", "shape": [6]},
      {"name": "fc.weight", "shape": [10, 864]}, {"name": "fc.bias", "shape": [10]}]}})");
}

TEST(ExternalSpec, ParsesItsLayoutAndRoundTrips) {
  auto spec = parse_model_spec(torch_like_spec());
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->type, ModelType::external);
  ASSERT_EQ(spec->layout.entries().size(), 8u);
  EXPECT_EQ(spec->layout.total(), 150u + 6 * 5 + 8640 + 10);
  EXPECT_EQ(spec->layout.entries()[6].offset, 180u);
  auto again = parse_model_spec(nlohmann::json(*spec));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->layout, spec->layout);
  auto layout = layout_of(*spec);
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->fingerprint(), spec->layout.fingerprint());
}

TEST(ExternalSpec, MarksNormalisationTensorsForFedBN) {
  auto j = torch_like_spec();
  for (int i : {2, 3, 4, 5}) {  // bn1's weight, bias, running mean and variance
    j["layout"]["tensors"][i]["normalization"] = true;
  }
  j["layout"]["tensors"][0]["normalization"] = false;  // said explicitly: not marked
  auto spec = parse_model_spec(j);
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->normalization_tensors, (std::vector<std::size_t>{2, 3, 4, 5}));
  EXPECT_TRUE(has_batch_norm(*spec));
  // bn1's four tensors sit side by side after conv1: one range of 24 values.
  EXPECT_EQ(external_site_ranges(*spec), (std::vector<ValueRange>{{156, 24}}));
  // The marks survive the spec's JSON (what TRAIN carries); the fingerprint ignores them.
  auto again = parse_model_spec(nlohmann::json(*spec));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->normalization_tensors, spec->normalization_tensors);
  EXPECT_EQ(again->layout.fingerprint(), parse_model_spec(torch_like_spec())->layout.fingerprint());
  EXPECT_FALSE(has_batch_norm(*parse_model_spec(torch_like_spec())));

  j["layout"]["tensors"][1]["normalization"] = "yes";
  auto refused = parse_model_spec(j);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("'layout.tensors[1].normalization' must be true or false"),
            std::string::npos)
      << refused.error().message;
}

TEST(ExternalSpec, CannotBeBuiltAndSaysWhy) {
  auto spec = parse_model_spec(torch_like_spec());
  ASSERT_TRUE(spec);
  auto built = build_model(*spec);
  ASSERT_FALSE(built);
  EXPECT_EQ(built.error().code, errc::failed_precondition);
  EXPECT_NE(built.error().message.find("Python SDK"), std::string::npos) << built.error().message;
}

TEST(ExternalSpec, RefusesBadLayoutsNamingTheKey) {
  auto message = [](nlohmann::json j) {
    auto spec = parse_model_spec(j, JsonPath("run config", "model"));
    return spec ? std::string("accepted") : spec.error().message;
  };
  auto j = torch_like_spec();
  j.erase("layout");
  EXPECT_NE(message(j).find("'model.layout' is required"), std::string::npos) << message(j);
  j = torch_like_spec();
  j["layout"]["tensors"][1]["shape"] = {0};
  EXPECT_NE(message(j).find("'model.layout.tensors[1].shape[0]'"), std::string::npos) << message(j);
  j = torch_like_spec();
  j["layout"]["tensors"][2]["name"] = "conv1.weight";
  EXPECT_NE(message(j).find("duplicate"), std::string::npos) << message(j);
  j = torch_like_spec();
  j["layout"]["tensors"][0]["name"] = "has space";
  EXPECT_NE(message(j).find("'model.layout.tensors[0].name'"), std::string::npos) << message(j);
  j = torch_like_spec();
  j["layout"]["tensors"] = nlohmann::json::array();
  EXPECT_NE(message(j).find("at least one tensor"), std::string::npos) << message(j);
  j = torch_like_spec();
  j["layout"]["tensors"][0]["shape"] = {65536, 65536};  // 2^32 parameters
  const auto too_big = parse_model_spec(j);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().code, errc::resource_exhausted);
  j = torch_like_spec();
  j["hidden"] = {10};
  EXPECT_NE(message(j).find("applies only to an mlp"), std::string::npos) << message(j);
  EXPECT_NE(message(nlohmann::json::parse(R"({"type": "mlp", "hidden": [4], "layout": {}})"))
                .find("'model.layout' applies only to an external model"),
            std::string::npos);
}

TEST(ExternalSpec, DefaultStartFollowsTorchsRulesAndTheSeed) {
  auto spec = parse_model_spec(torch_like_spec());
  ASSERT_TRUE(spec);
  const auto& layout = spec->layout;
  const auto a = initialize_external(layout, 11);
  ASSERT_EQ(a.size(), layout.total());
  EXPECT_EQ(initialize_external(layout, 11), a);
  EXPECT_NE(initialize_external(layout, 12), a);
  auto tensor = [&](const char* name) {
    const auto* e = layout.find(name);
    return std::vector<float>(a.begin() + static_cast<std::ptrdiff_t>(e->offset),
                              a.begin() + static_cast<std::ptrdiff_t>(e->offset + e->size));
  };
  // conv1.weight: fan_in 1*5*5 = 25, bound 0.2; fc.weight: fan_in 864.
  for (auto [name, bound] : {std::pair{"conv1.weight", 0.2}, {"fc.weight", 1 / std::sqrt(864.0)}}) {
    const auto w = tensor(name);
    double max_abs = 0;
    double sum_sq = 0;
    for (float x : w) {
      max_abs = std::max(max_abs, static_cast<double>(std::abs(x)));
      sum_sq += static_cast<double>(x) * x;
    }
    EXPECT_LE(max_abs, bound) << name;
    EXPECT_GT(max_abs, 0.9 * bound) << name;
    // Uniform in +-b has variance b^2/3.
    EXPECT_NEAR(sum_sq / static_cast<double>(w.size()), bound * bound / 3, 0.35 * bound * bound / 3)
        << name;
  }
  EXPECT_EQ(tensor("conv1.bias"), std::vector<float>(6, 0.0f));
  EXPECT_EQ(tensor("bn1.weight"), std::vector<float>(6, 1.0f));
  EXPECT_EQ(tensor("bn1.bias"), std::vector<float>(6, 0.0f));
  EXPECT_EQ(tensor("bn1.running_mean"), std::vector<float>(6, 0.0f));
  EXPECT_EQ(tensor("bn1.running_var"), std::vector<float>(6, 1.0f));
}

}  // namespace
}  // namespace fedcore::model
