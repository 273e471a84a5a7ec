// The feature-statistics messages (types 10 and 11) and TRAIN's "scaling": round trips,
// and every malformed report refused by name.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shared/protocol/frame.hpp"
#include "shared/protocol/messages.hpp"

namespace fedcore::protocol {
namespace {

using nlohmann::json;

constexpr const char* kNonce = "0123456789abcdef0123456789abcdef";

FeatureStatsReport sample_report() {
  FeatureStatsReport m;
  m.run_id = 3;
  m.nonce = kNonce;
  m.features = 3;
  m.count = {455, 455, 455};
  m.sum = {6431.25, -0.125, 1e5 / 3.0};
  m.sum_squares = {95000.5, 17.0, 1e9};
  return m;
}

// The report as JSON, with one field replaced.
std::string report_with(const char* key, json value) {
  auto j = json::parse(to_metadata(sample_report()));
  j[key] = std::move(value);
  return j.dump();
}

void expect_refused(const std::string& metadata, const std::string& words) {
  auto parsed = parse_feature_stats_report(metadata);
  ASSERT_FALSE(parsed) << metadata;
  EXPECT_EQ(parsed.error().code, errc::invalid_argument);
  EXPECT_NE(parsed.error().message.find(words), std::string::npos)
      << parsed.error().message << " (expected '" << words << "')";
}

TEST(FeatureStatsMessages, TypesAreNamedAndKnown) {
  EXPECT_EQ(static_cast<std::uint16_t>(MessageType::feature_stats_request), 10);
  EXPECT_EQ(static_cast<std::uint16_t>(MessageType::feature_stats), 11);
  EXPECT_EQ(message_type_name(MessageType::feature_stats_request), "feature_stats_request");
  EXPECT_EQ(message_type_name(MessageType::feature_stats), "feature_stats");
}

TEST(FeatureStatsMessages, RequestAndReportRoundTripExactly) {
  auto request = parse_feature_stats_request(to_metadata(FeatureStatsRequest{3, kNonce, 30}));
  ASSERT_TRUE(request) << request.error().to_string();
  EXPECT_EQ(request->run_id, 3);
  EXPECT_EQ(request->nonce, kNonce);
  EXPECT_EQ(request->features, 30u);

  const auto sent = sample_report();
  auto report = parse_feature_stats_report(to_metadata(sent));
  ASSERT_TRUE(report) << report.error().to_string();
  EXPECT_EQ(report->run_id, 3);
  EXPECT_EQ(report->nonce, kNonce);
  EXPECT_EQ(report->features, 3u);
  EXPECT_EQ(report->count, sent.count);
  EXPECT_EQ(report->sum, sent.sum);  // bit for bit: JSON doubles round-trip
  EXPECT_EQ(report->sum_squares, sent.sum_squares);
}

TEST(FeatureStatsMessages, RequestRefusesAFeatureCountOutOfRange) {
  for (const auto* bad : {R"({"run":3,"nonce":"0123456789abcdef0123456789abcdef","features":0})",
                          R"({"run":3,"nonce":"0123456789abcdef0123456789abcdef","features":513})",
                          R"({"run":3,"nonce":"0123456789abcdef0123456789abcdef"})",
                          R"({"run":0,"nonce":"0123456789abcdef0123456789abcdef","features":3})",
                          R"({"run":3,"nonce":"xyz","features":3})"}) {
    auto parsed = parse_feature_stats_request(bad);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_EQ(parsed.error().code, errc::invalid_argument);
  }
}

TEST(FeatureStatsMessages, ReportRefusesNonFiniteValues) {
  // JSON has no NaN or infinity: a sender can only write null, a string, or a number too
  // large for a double (which parses as infinity).
  expect_refused(report_with("sum", json::array({1.0, nullptr, 2.0})), "'sum'");
  expect_refused(report_with("sum", json::array({1.0, "nan", 2.0})), "'sum'");
  // Regression (issue 19): the overflow used to escape parse_metadata as an exception.
  auto huge = to_metadata(sample_report());
  huge.replace(huge.find("6431.25"), 7, "1e999");
  expect_refused(huge, "number overflow");
  auto huge_square = to_metadata(sample_report());
  huge_square.replace(huge_square.find("95000.5"), 7, "-1e999");
  expect_refused(huge_square, "number overflow");
  // Every message's parser answers the same way, never with an exception.
  auto hello = parse_hello(R"({"samples":1e999,"input_shape":[4],"num_classes":2})");
  ASSERT_FALSE(hello);
  EXPECT_EQ(hello.error().code, errc::invalid_argument);
}

TEST(FeatureStatsMessages, ReportRefusesAWrongFeatureCount) {
  expect_refused(report_with("features", 4), "'features' = 4 entries (got 3, 3, 3)");
  expect_refused(report_with("count", json::array({455, 455})), "(got 2, 3, 3)");
  expect_refused(report_with("sum_squares", json::array({1.0, 2.0, 3.0, 4.0})), "(got 3, 3, 4)");
  expect_refused(report_with("features", 0), "'features'");
  expect_refused(report_with("features", 600), "'features'");
  expect_refused(report_with("sum", json::array()), "'features' = 3 entries (got 3, 0, 3)");
}

TEST(FeatureStatsMessages, ReportRefusesNegativeCountsAndImpossibleMoments) {
  expect_refused(report_with("count", json::array({455, -1, 455})), "'count'");
  expect_refused(report_with("count", json::array({455, 1.5, 455})), "'count'");
  expect_refused(report_with("count", json::array({455, std::uint64_t{1} << 41, 455})), "'count'");
  expect_refused(report_with("sum_squares", json::array({95000.5, -17.0, 1e9})), "'sum_squares'");
  // (sum x)^2 > n * sum x^2 cannot come from any data.
  expect_refused(report_with("sum_squares", json::array({1.0, 17.0, 1e9})), "feature 0");
  // No values but a sum.
  expect_refused(report_with("count", json::array({0, 455, 455})), "feature 0");
  expect_refused(report_with("nonce", "ABC"), "'nonce'");
  expect_refused("[1,2]", "feature_stats");
}

TEST(FeatureStatsMessages, TrainCarriesTheScale) {
  TrainRequest m;
  m.run_id = 4;
  m.round = 1;
  m.nonce = kNonce;
  m.model_spec = {{"type", "logreg"}};
  m.layout_fingerprint = "bb8f61515bf6ab05";
  m.scaling = {ScalingMode::federated, {14.127, -0.5, 1e3 / 7}, {3.52, 1.0, 0.25}};
  auto t = parse_train_request(to_metadata(m));
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->scaling.mode, ScalingMode::federated);
  EXPECT_EQ(t->scaling.mean, m.scaling.mean);
  EXPECT_EQ(t->scaling.stddev, m.scaling.stddev);

  m.scaling = {ScalingMode::site, {}, {}};
  t = parse_train_request(to_metadata(m));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->scaling.mode, ScalingMode::site);
  EXPECT_TRUE(t->scaling.mean.empty());

  // An older server sends no "scaling": the features are used as loaded.
  auto j = json::parse(to_metadata(m));
  j.erase("scaling");
  t = parse_train_request(j.dump());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->scaling.mode, ScalingMode::none);
}

TEST(FeatureStatsMessages, TrainRefusesABadScale) {
  TrainRequest m;
  m.run_id = 4;
  m.round = 1;
  m.nonce = kNonce;
  m.model_spec = {{"type", "logreg"}};
  m.layout_fingerprint = "bb8f61515bf6ab05";
  const auto with_scaling = [&](json scaling) {
    auto j = json::parse(to_metadata(m));
    j["scaling"] = std::move(scaling);
    return j.dump();
  };
  const std::pair<json, const char*> cases[] = {
      {{{"mode", "global"}}, "unknown 'mode'"},
      {json::object(), "missing 'mode'"},
      {{{"mode", "federated"}, {"mean", {1.0}}}, "missing 'std'"},
      {{{"mode", "federated"}, {"mean", {1.0, 2.0}}, {"std", {1.0}}}, "one entry per feature"},
      {{{"mode", "federated"}, {"mean", json::array()}, {"std", json::array()}},
       "one entry per feature"},
      {{{"mode", "federated"}, {"mean", {1.0}}, {"std", {0.0}}}, "must be positive"},
      {{{"mode", "federated"}, {"mean", {1.0}}, {"std", {-2.0}}}, "'std'"},
      {{{"mode", "federated"}, {"mean", {nullptr}}, {"std", {1.0}}}, "'mean'"},
      {{{"mode", "federated"},
        {"mean", json(std::vector<double>(513, 0.0))},
        {"std", json(std::vector<double>(513, 1.0))}},
       "at most 512"},
      {"federated", "train.scaling"},
  };
  for (const auto& [scaling, words] : cases) {
    auto parsed = parse_train_request(with_scaling(scaling));
    ASSERT_FALSE(parsed) << scaling.dump();
    EXPECT_EQ(parsed.error().code, errc::invalid_argument);
    EXPECT_NE(parsed.error().message.find(words), std::string::npos)
        << parsed.error().message << " (expected '" << words << "')";
  }
}

// The largest messages stay inside the default 64 KiB metadata limit.
TEST(FeatureStatsMessages, LargestMessagesFitTheMetadataLimit) {
  FeatureStatsReport report;
  report.run_id = std::int64_t{1} << 40;
  report.nonce = kNonce;
  report.features = kMaxScaledFeatures;
  report.count.assign(kMaxScaledFeatures, std::uint64_t{1} << 40);
  report.sum.assign(kMaxScaledFeatures, -1.2345678901234567e+299);
  report.sum_squares.assign(kMaxScaledFeatures, 1.2345678901234567e+299);
  EXPECT_LT(to_metadata(report).size(), FrameLimits{}.max_metadata_bytes / 2);
  TrainRequest train;
  train.nonce = kNonce;
  train.model_spec = {{"type", "logreg"}};
  train.scaling = {ScalingMode::federated,
                   std::vector<double>(kMaxScaledFeatures, -1.2345678901234567e+299),
                   std::vector<double>(kMaxScaledFeatures, 1.2345678901234567e+299)};
  EXPECT_LT(to_metadata(train).size(), FrameLimits{}.max_metadata_bytes / 2);
}

}  // namespace
}  // namespace fedcore::protocol
