#include "shared/model/model.hpp"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shared/model/conv_wide.hpp"
#include "shared/model/layers.hpp"
#include "shared/model/loss.hpp"
#include "shared/model/spec.hpp"
#include "tests/model/gradient_check.hpp"

namespace fedcore::model {
namespace {

Model build(const char* json) {
  auto spec = parse_model_spec(std::string_view(json));
  EXPECT_TRUE(spec) << spec.error().to_string();
  auto model = build_model(*spec);
  EXPECT_TRUE(model) << model.error().to_string();
  return std::move(*model);
}

TEST(Model, McMahanCnnHasThePublishedParameterCount) {
  Model cnn = build(R"({"type":"cnn","input_shape":[28,28,1],"num_classes":10})");
  // McMahan et al. 2017 report 1,663,370 parameters for this network.
  EXPECT_EQ(cnn.param_count(), 1663370u);
  EXPECT_EQ(cnn.layout().entries().front().name, "conv1.weight");
  EXPECT_EQ(cnn.layout().entries().front().shape, (Shape{5, 5, 1, 32}));
  EXPECT_EQ(cnn.output_shape(), (Shape{10}));
}

// Each conv stage pools before its ReLU (the same function as ReLU then pooling, see
// MaxPool2d.CommutesWithReLUInValueAndGradient), so the ReLU runs on the pooled values.
TEST(Model, CnnStagesPoolBeforeTheirReLU) {
  Model cnn = build(R"({"type":"cnn","input_shape":[28,28,1],"num_classes":10})");
  std::vector<std::string> kinds;
  for (std::size_t i = 0; i < 6; ++i) {
    kinds.emplace_back(cnn.layer(i).kind());
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"conv2d", "maxpool2d", "relu", "conv2d", "maxpool2d",
                                             "relu"}));
  EXPECT_EQ(cnn.layer(2).input_shape(), (Shape{14, 14, 32}));
}

// On a CPU with x86-64-v4 both of the cnn's convolutions skip im2col (model/conv_wide.hpp):
// the second in every pass, the first (one input channel) in forward and weight gradient;
// for Fashion-MNIST and CIFAR shapes alike. Elsewhere the first keeps the AVX2 kernel or
// the product.
TEST(Model, TheCnnsConvolutionsRunOnTheWideKernelsWhereTheCpuHasThem) {
  if (!kernels::wide_applies({14, 14, 32, 14, 14, 64, 5, 1, 2})) {
    GTEST_SKIP() << "no x86-64-v4 on this CPU (or build): the wide kernels are not taken here";
  }
  for (const char* spec : {R"({"type":"cnn","input_shape":[28,28,1],"num_classes":10})",
                           R"({"type":"cnn","input_shape":[32,32,3],"num_classes":10})"}) {
    Model cnn = build(spec);
    const auto& first = dynamic_cast<const Conv2d&>(cnn.layer(0));
    const auto& second = dynamic_cast<const Conv2d&>(cnn.layer(3));
    EXPECT_EQ(first.kernels(), ConvKernels::wide_forward) << spec;
    EXPECT_EQ(second.kernels(), ConvKernels::direct_wide) << spec;
  }
}

TEST(Model, LayoutTilesTheFlatBuffer) {
  Model mlp = build(R"({"type":"mlp","hidden":[16,8],"input_shape":[12],"num_classes":3})");
  std::size_t offset = 0;
  for (const auto& e : mlp.layout().entries()) {
    EXPECT_EQ(e.offset, offset) << e.name;
    offset += e.size;
  }
  EXPECT_EQ(offset, mlp.param_count());
  EXPECT_EQ(mlp.params().size(), mlp.grads().size());
  EXPECT_EQ(mlp.param_count(), 12u * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3);
}

TEST(Model, FingerprintIsStableAndShapeSensitive) {
  Model a = build(R"({"type":"logreg","input_shape":[30],"num_classes":2})");
  Model b = build(R"({"type":"logreg","input_shape":[30],"num_classes":2})");
  Model c = build(R"({"type":"logreg","input_shape":[31],"num_classes":2})");
  EXPECT_EQ(a.layout().fingerprint(), b.layout().fingerprint());
  EXPECT_NE(a.layout().fingerprint(), c.layout().fingerprint());
  // Pinned: the fingerprint is part of the wire contract and must never drift
  // (docs/formats.md gives its exact input).
  EXPECT_EQ(a.layout().fingerprint_hex(), "bb8f61515bf6ab05");
}

TEST(Model, ParamsSpanWritesThroughToTheLayers) {
  Model logreg = build(R"({"type":"logreg","input_shape":[2],"num_classes":2})");
  auto p = logreg.params();
  ASSERT_EQ(p.size(), 3u);
  p[0] = 1.0f;
  p[1] = -1.0f;
  p[2] = 0.25f;
  Matrix x(2, 1);
  x << 3, 2;
  EXPECT_FLOAT_EQ(logreg.forward(x, Phase::eval)(0, 0), 3.0f - 2.0f + 0.25f);
}

TEST(Model, CopyReseatsViewsOntoItsOwnBuffers) {
  Model original = build(R"({"type":"mlp","hidden":[4],"input_shape":[3],"num_classes":3})");
  original.initialize(1);
  Model copy = original;
  ASSERT_NE(copy.params().data(), original.params().data());
  Rng rng(2);
  const Matrix x = testing::random_matrix(3, 5, rng);
  const Matrix before = original.forward(x, Phase::eval);
  EXPECT_EQ(copy.forward(x, Phase::eval), before);
  // Changing the copy must not change the original, and must change the copy's output.
  for (auto& v : copy.params()) {
    v *= 2.0f;
  }
  EXPECT_EQ(original.forward(x, Phase::eval), before);
  EXPECT_NE(copy.forward(x, Phase::eval), before);
  // Assignment and move keep the same guarantees.
  Model assigned = build(R"({"type":"mlp","hidden":[4],"input_shape":[3],"num_classes":3})");
  assigned = original;
  EXPECT_EQ(assigned.forward(x, Phase::eval), before);
  Model moved = std::move(assigned);
  EXPECT_EQ(moved.forward(x, Phase::eval), before);
}

// Vectorised loops over an unaligned buffer round their scalar head differently from the
// SIMD body, so the same training run used to differ between processes whose heaps put
// the buffers at different alignments. Every model, however made, keeps them on 64 bytes.
TEST(Model, ParameterAndGradientBuffersAre64ByteAligned) {
  const auto aligned = [](const Model& m) {
    return reinterpret_cast<std::uintptr_t>(m.params().data()) % 64 == 0 &&
           reinterpret_cast<std::uintptr_t>(m.grads().data()) % 64 == 0;
  };
  // Odd sizes, so a malloc-backed buffer would land on 16 modulo 64 sooner or later.
  std::vector<Model> models;
  for (int hidden = 1; hidden <= 9; ++hidden) {
    const std::string spec = R"({"type":"mlp","hidden":[)" + std::to_string(hidden) +
                             R"(],"input_shape":[3],"num_classes":3})";
    models.push_back(build(spec.c_str()));
    EXPECT_TRUE(aligned(models.back())) << "hidden " << hidden;
    Model copy = models.back();
    EXPECT_TRUE(aligned(copy)) << "copy, hidden " << hidden;
    models.front() = copy;
    EXPECT_TRUE(aligned(models.front())) << "assigned, hidden " << hidden;
  }
}

TEST(Model, InitializationIsDeterministicForASeed) {
  Model a =
      build(R"({"type":"cnn","input_shape":[8,8,1],"num_classes":4,"channels":[2,3],"dense":5})");
  Model b = a;
  a.initialize(42);
  b.initialize(42);
  EXPECT_TRUE(std::equal(a.params().begin(), a.params().end(), b.params().begin()));
  b.initialize(43);
  EXPECT_FALSE(std::equal(a.params().begin(), a.params().end(), b.params().begin()));
}

// Whole-model parameter gradient through conv, pool, flatten, dense and the loss,
// against central differences of the loss.
TEST(Model, EndToEndGradientMatchesFiniteDifferences) {
  Model cnn = build(
      R"({"type":"cnn","input_shape":[6,6,2],"num_classes":3,"channels":[2,3],"kernel":3,"dense":4})");
  cnn.initialize(5);
  Rng rng(6);
  const Matrix x = testing::random_matrix(72, 3, rng);
  const std::vector<std::int32_t> labels{0, 2, 1};
  Matrix grad_logits;
  evaluate_loss(LossKind::softmax_cross_entropy, cnn.forward(x, Phase::train), labels,
                &grad_logits);
  cnn.backward(grad_logits);
  const std::vector<double> analytic(cnn.grads().begin(), cnn.grads().end());
  std::vector<double> numeric;
  auto params = cnn.params();
  // A step of 1e-3: with 1e-2, perturbations cross ReLU and max-pool kinks in a
  // multi-layer net (measured error 4.6e-2); with 1e-3 the error is about 5e-5.
  constexpr float kEps = 1e-3f;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float saved = params[i];
    params[i] = saved + kEps;
    const double plus = evaluate_loss(LossKind::softmax_cross_entropy, cnn.forward(x, Phase::train),
                                      labels, nullptr)
                            .loss;
    params[i] = saved - kEps;
    const double minus = evaluate_loss(LossKind::softmax_cross_entropy,
                                       cnn.forward(x, Phase::train), labels, nullptr)
                             .loss;
    params[i] = saved;
    numeric.push_back((plus - minus) / (2.0 * kEps));
  }
  EXPECT_LE(testing::relative_error(analytic, numeric), 1e-3);
}

TEST(ModelSpec, RejectsBadSpecsNamingTheProblem) {
  struct Case {
    const char* json;
    const char* fragment;
  };
  const Case cases[] = {
      {R"({"type":"transformer"})", "'type'"},
      {R"({})", "'type'"},
      {R"({"type":"mlp"})", "'hidden'"},
      {R"({"type":"mlp","hidden":[0]})", "'hidden[0]'"},
      {R"({"type":"mlp","hidden":[-3]})", "'hidden[0]'"},
      {R"({"type":"mlp","hidden":"big"})", "'hidden'"},
      {R"({"type":"logreg","hidden":[4]})", "'hidden'"},
      {R"({"type":"logreg","layers":3})", "unknown key 'layers'"},
      {R"({"type":"mlp","hidden":[4],"dropout":1.0})", "'dropout'"},
      {R"({"type":"cnn","input_shape":[30],"num_classes":2})", "image input_shape"},
      {R"({"type":"cnn","input_shape":[2,2,1],"num_classes":2})", "too small"},
      {R"({"type":"logreg","num_classes":1})", "'num_classes'"},
      {R"(not json)", "invalid JSON"},
  };
  for (const auto& c : cases) {
    auto spec = parse_model_spec(std::string_view(c.json));
    ASSERT_FALSE(spec) << c.json;
    EXPECT_EQ(spec.error().code, errc::invalid_argument) << c.json;
    EXPECT_NE(spec.error().message.find(c.fragment), std::string::npos) << spec.error().message;
  }
}

// Issue 19: a spec is read strictly; each message names the key (and, standalone, the
// document "model spec").
TEST(ModelSpec, StrictReadingNamesEveryProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"mlp","hiden":[4]})", "model spec: unknown key 'hiden'; did you mean 'hidden'?"},
      {R"({"type":"cnn","kernal":3})", "model spec: unknown key 'kernal'; did you mean 'kernel'?"},
      {R"({"type":"cnn","kernel":"3"})",
       "model spec: 'kernel' must be an integer in [1, 15], got \"3\""},
      {R"({"type":"cnn","kernel":16})",
       "model spec: 'kernel' must be an integer in [1, 15], got 16"},
      {R"({"type":"cnn","kernel":3.5})",
       "model spec: 'kernel' must be an integer in [1, 15], got 3.5"},
      {R"({"type":"cnn","dense":18446744073709551617})",
       "model spec: 'dense' must be an integer in [1, 65536], got 1.8446744073709552e+19"},
      {R"({"type":"logreg","num_classes":4294967298})",
       "model spec: 'num_classes' must be an integer in [2, 100000], got 4294967298"},
      {R"({"type":"cnn","input_shape":[28,28,1,1]})",
       "model spec: 'input_shape' must be an array of 1 to 3 integers in [1, 65536], got an array"},
      {R"({"type":"mlp","hidden":[8,"8"]})",
       "model spec: 'hidden[1]' must be an integer in [1, 65536], got \"8\""},
      {R"({"type":"mlp","hidden":[8],"channels":[4]})",
       "model spec: 'channels' applies only to a cnn"},
      {R"({"type":"mlp","hidden":[8],"dropout":-0.1})",
       "model spec: 'dropout' must be a number in [0, 1), got -0.1"},
      {R"({"type":"MLP","hidden":[8]})",
       "model spec: 'type' must be one of \"logreg\", \"mlp\", \"cnn\", \"external\", "
       "\"mobilenetv2\", got \"MLP\"; "
       "did you mean "
       "\"mlp\"?"},
      {R"({"type":"logreg","type":"mlp"})", "model spec: duplicate key 'type'"},
  };
  for (const auto& [text, message] : cases) {
    auto spec = parse_model_spec(std::string_view(text));
    ASSERT_FALSE(spec) << text;
    EXPECT_EQ(spec.error().code, errc::invalid_argument) << text;
    EXPECT_EQ(spec.error().message, message) << text;
  }
  nlohmann::json inf{
      {"type", "mlp"}, {"hidden", {8}}, {"dropout", std::numeric_limits<double>::infinity()}};
  auto spec = parse_model_spec(inf);
  ASSERT_FALSE(spec);
  EXPECT_EQ(spec.error().message, "model spec: 'dropout' must be a number in [0, 1), got inf");
  // Inside another document the spec's keys carry its path there.
  auto nested = parse_model_spec(nlohmann::json::parse(R"({"type":"mlp","hidden":[0]})"),
                                 JsonPath("run config", "model"));
  ASSERT_FALSE(nested);
  EXPECT_EQ(nested.error().message,
            "run config: 'model.hidden[0]' must be an integer in [1, 65536], got 0");
}

TEST(ModelSpec, RefusesHugeModelsBeforeAllocating) {
  auto spec = parse_model_spec(std::string_view(
      R"({"type":"mlp","hidden":[65536,65536,65536],"input_shape":[65536],"num_classes":10})"));
  ASSERT_FALSE(spec);
  EXPECT_EQ(spec.error().code, errc::resource_exhausted);
}

TEST(ModelSpec, CompletesFromDataAndRoundTripsThroughJson) {
  auto spec = parse_model_spec(std::string_view(R"({"type":"mlp","hidden":[256,128]})"));
  ASSERT_TRUE(spec);
  EXPECT_FALSE(spec->complete());
  auto completed = complete_spec(*spec, {28, 28, 1}, 10);
  ASSERT_TRUE(completed) << completed.error().to_string();
  EXPECT_EQ(completed->input_shape, (Shape{28, 28, 1}));
  auto again = parse_model_spec(nlohmann::json(*completed));
  ASSERT_TRUE(again);
  EXPECT_EQ(build_model(*again)->layout(), build_model(*completed)->layout());
  EXPECT_EQ(loss_for(*completed), LossKind::softmax_cross_entropy);
  auto binary = complete_spec(*parse_model_spec(std::string_view(R"({"type":"logreg"})")), {30}, 2);
  ASSERT_TRUE(binary);
  EXPECT_EQ(loss_for(*binary), LossKind::binary_cross_entropy);
  EXPECT_EQ(build_model(*binary)->output_size(), 1u);
  auto mismatch = complete_spec(*completed, {30}, 2);
  ASSERT_FALSE(mismatch);
  EXPECT_NE(mismatch.error().message.find("does not match"), std::string::npos);
}

}  // namespace
}  // namespace fedcore::model
