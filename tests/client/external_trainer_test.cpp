// A site's own trainer behind the daemon (client/external_trainer.hpp): what the daemon
// checks before handing the global model over, and before the result may leave.
#include "client/external_trainer.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shared/model/spec.hpp"

namespace fedcore::client {
namespace {

nlohmann::json external_spec() {
  return nlohmann::json::parse(R"({"type": "external", "input_shape": [3], "num_classes": 2,
    "layout": {"tensors": [{"name": "w", "shape": [1, 3]}, {"name": "b", "shape": [1]}]}})");
}

model::ParamLayout layout_of(const nlohmann::json& spec) {
  return model::parse_model_spec(spec)->layout;
}

// Adds 1 to every parameter, or does what the test asks.
class FakeSite : public ExternalTrainer {
 public:
  SiteDataShape shape() const override { return {10, 4, {3}, 2}; }
  std::optional<model::ParamLayout> layout() const override { return declared; }
  result<ExternalFit> fit(const protocol::TrainRequest&, const model::ParamLayout&,
                          std::span<const float> global) override {
    ++fits;
    if (failure) {
      return *failure;
    }
    ExternalFit out{{global.begin(), global.end()}, samples, 0.5, 0.75};
    for (auto& x : out.params) {
      x += 1;
    }
    if (extra) {
      out.params.push_back(0);
    }
    if (poison) {
      out.params[1] = std::numeric_limits<float>::quiet_NaN();
    }
    return out;
  }
  result<protocol::LocalEvaluation> evaluate(std::int64_t, std::int64_t, const model::ParamLayout&,
                                             std::span<const float> params) override {
    return protocol::LocalEvaluation{params[0], 0.5, 4};
  }

  std::optional<model::ParamLayout> declared;
  std::optional<error> failure;
  std::uint64_t samples = 10;
  bool extra = false;
  bool poison = false;
  int fits = 0;
};

protocol::TrainRequest request_for(const nlohmann::json& spec) {
  protocol::TrainRequest r;
  r.run_id = 4;
  r.round = 2;
  r.nonce = std::string(32, 'a');
  r.model_spec = spec;
  r.layout_fingerprint = layout_of(spec).fingerprint_hex();
  return r;
}

const std::vector<float> kGlobal{1, 2, 3, 4};

TEST(ExternalTrainer, FitsAndEchoesTheRequestsBinding) {
  FakeSite site;
  site.declared = layout_of(external_spec());
  auto request = request_for(external_spec());
  request.evaluate = true;
  const auto out = train_externally(site, request, kGlobal);
  ASSERT_FALSE(out.failure) << out.failure->message;
  EXPECT_EQ(out.params, (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(out.report.run_id, 4);
  EXPECT_EQ(out.report.round, 2);
  EXPECT_EQ(out.report.nonce, request.nonce);
  EXPECT_EQ(out.report.layout_fingerprint, request.layout_fingerprint);
  EXPECT_EQ(out.report.samples, 10u);
  EXPECT_DOUBLE_EQ(out.report.accuracy, 0.75);
  ASSERT_TRUE(out.report.evaluation);
  EXPECT_DOUBLE_EQ(out.report.evaluation->loss, 1.0);  // of the received model
}

TEST(ExternalTrainer, RefusesARequestItCannotHonourWithoutCallingFit) {
  auto failure_of = [](FakeSite& site, const protocol::TrainRequest& request) {
    const auto out = train_externally(site, request, kGlobal);
    EXPECT_EQ(site.fits, 0);
    return out.failure ? out.failure->message : std::string("trained");
  };
  FakeSite site;
  // A built-in model is fedcore-client's to train.
  auto builtin = request_for(external_spec());
  builtin.model_spec = nlohmann::json::parse(R"({"type": "logreg", "input_shape": [3],
                                                 "num_classes": 2})");
  EXPECT_NE(failure_of(site, builtin).find("built-in"), std::string::npos);
  // The server's fingerprint is not the spec's layout.
  auto forged = request_for(external_spec());
  forged.layout_fingerprint = std::string(16, '0');
  EXPECT_NE(failure_of(site, forged).find("does not match"), std::string::npos);
  // The site declared another model: the first differing tensor is named.
  auto other = external_spec();
  other["layout"]["tensors"][1]["shape"] = {2};
  site.declared = layout_of(other);
  EXPECT_NE(failure_of(site, request_for(external_spec()))
                .find("tensor 1: the site has 'b' [2], the run 'b' [1]"),
            std::string::npos)
      << failure_of(site, request_for(external_spec()));
  site.declared.reset();
  // Record-level DP needs Fedcore's DP-SGD.
  auto dp = request_for(external_spec());
  dp.privacy.dp = protocol::DpMode::record;
  EXPECT_NE(failure_of(site, dp).find("DP-SGD"), std::string::npos);
}

TEST(ExternalTrainer, NothingLeavesWhenFitReturnsSomethingWrong) {
  const auto request = request_for(external_spec());
  FakeSite site;
  site.failure = fail(errc::internal, "ValueError: boom");
  auto out = train_externally(site, request, kGlobal);
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->message, "ValueError: boom");
  EXPECT_TRUE(out.params.empty());
  site.failure.reset();
  site.extra = true;
  out = train_externally(site, request, kGlobal);
  ASSERT_TRUE(out.failure);
  EXPECT_NE(out.failure->message.find("returned 5 parameters; the model has 4"), std::string::npos);
  site.extra = false;
  site.poison = true;
  out = train_externally(site, request, kGlobal);
  ASSERT_TRUE(out.failure);
  EXPECT_NE(out.failure->message.find("non-finite parameter at flat index 1"), std::string::npos);
  EXPECT_TRUE(out.params.empty());
  site.poison = false;
  site.samples = 0;
  out = train_externally(site, request, kGlobal);
  ASSERT_TRUE(out.failure);
  EXPECT_NE(out.failure->message.find("0 examples"), std::string::npos);
}

TEST(ExternalTrainer, EvaluatesOnlyTheAnnouncedLayout) {
  FakeSite site;
  protocol::EvaluateRequest request;
  request.model_spec = external_spec();
  request.layout_fingerprint = layout_of(external_spec()).fingerprint_hex();
  auto evaluation = evaluate_externally(site, request, kGlobal);
  ASSERT_TRUE(evaluation) << evaluation.error().message;
  EXPECT_EQ(evaluation->samples, 4u);
  EXPECT_FALSE(evaluate_externally(site, request, std::vector<float>{1, 2, 3}));
}

}  // namespace
}  // namespace fedcore::client
