// The federated-evaluation messages (types 6 and 7): round trips, the one shape per status,
// and every malformed message refused by name.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shared/protocol/frame.hpp"
#include "shared/protocol/messages.hpp"

namespace fedcore::protocol {
namespace {

using nlohmann::json;

constexpr const char* kNonce = "0123456789abcdef0123456789abcdef";

EvaluateRequest sample_request() {
  EvaluateRequest m;
  m.run_id = 4;
  m.round = 7;
  m.nonce = kNonce;
  m.model_spec = {{"type", "logreg"}, {"input_shape", {30}}, {"num_classes", 2}};
  m.layout_fingerprint = "00112233aabbccdd";
  m.final_model = true;
  m.privacy.secure_aggregation = true;
  m.scaling = {ScalingMode::federated, {0.5, -2.25}, {1.0, 3.5}};
  return m;
}

EvaluationReport sample_report() {
  EvaluationReport m;
  m.run_id = 4;
  m.round = 7;
  m.nonce = kNonce;
  m.status = EvaluationStatus::ok;
  m.loss = 0.3125;
  m.accuracy = 0.875;
  m.samples = 114;
  return m;
}

std::string report_with(const char* key, json value) {
  auto j = json::parse(to_metadata(sample_report()));
  j[key] = std::move(value);
  return j.dump();
}

void expect_refused(const std::string& metadata, const std::string& words) {
  auto parsed = parse_evaluation_report(metadata);
  ASSERT_FALSE(parsed) << metadata;
  EXPECT_EQ(parsed.error().code, errc::invalid_argument);
  EXPECT_NE(parsed.error().message.find(words), std::string::npos)
      << parsed.error().message << " (expected '" << words << "')";
}

TEST(EvaluationMessages, TypesAreNamedAndKnown) {
  EXPECT_EQ(static_cast<std::uint16_t>(MessageType::evaluate), 6);
  EXPECT_EQ(static_cast<std::uint16_t>(MessageType::evaluation), 7);
  EXPECT_EQ(message_type_name(MessageType::evaluate), "evaluate");
  EXPECT_EQ(message_type_name(MessageType::evaluation), "evaluation");
  EXPECT_EQ(kEvaluateCapability, "evaluate");
}

TEST(EvaluationMessages, RequestRoundTripsEveryField) {
  const auto sent = sample_request();
  auto got = parse_evaluate_request(to_metadata(sent));
  ASSERT_TRUE(got) << got.error().to_string();
  EXPECT_EQ(got->run_id, 4);
  EXPECT_EQ(got->round, 7);
  EXPECT_EQ(got->nonce, kNonce);
  EXPECT_EQ(got->model_spec, sent.model_spec);
  EXPECT_EQ(got->layout_fingerprint, "00112233aabbccdd");
  EXPECT_TRUE(got->final_model);
  EXPECT_TRUE(got->privacy.secure_aggregation);
  EXPECT_EQ(got->privacy.dp, DpMode::none);
  EXPECT_EQ(got->scaling.mode, ScalingMode::federated);
  EXPECT_EQ(got->scaling.mean, (std::vector<double>{0.5, -2.25}));
  EXPECT_EQ(got->scaling.stddev, (std::vector<double>{1.0, 3.5}));
}

TEST(EvaluationMessages, RequestDefaultsAndRefusals) {
  // Without "final", "privacy" and "scaling": an intermediate model, no terms, no scale.
  auto j = json::parse(to_metadata(sample_request()));
  j.erase("final");
  j.erase("privacy");
  j.erase("scaling");
  auto got = parse_evaluate_request(j.dump());
  ASSERT_TRUE(got) << got.error().to_string();
  EXPECT_FALSE(got->final_model);
  EXPECT_FALSE(got->privacy.secure_aggregation);
  EXPECT_EQ(got->scaling.mode, ScalingMode::none);

  const auto refused = [](const char* key, json value, const std::string& words) {
    auto bad = json::parse(to_metadata(sample_request()));
    if (value.is_discarded()) {
      bad.erase(key);
    } else {
      bad[key] = std::move(value);
    }
    auto parsed = parse_evaluate_request(bad.dump());
    ASSERT_FALSE(parsed) << bad.dump();
    EXPECT_EQ(parsed.error().code, errc::invalid_argument);
    EXPECT_NE(parsed.error().message.find(words), std::string::npos) << parsed.error().message;
  };
  refused("run", 0, "'run'");
  refused("round", json::value_t::discarded, "missing 'round'");
  refused("nonce", "ABC", "'nonce'");
  refused("layout", "0011", "'layout'");
  refused("model", "logreg", "'model' must be a JSON object");
  refused("final", "yes", "'final' must be true or false");
  refused("privacy", json{{"dp", "sometimes"}}, "evaluate.privacy: unknown 'dp' mode");
  refused("scaling", json{{"mode", "federated"}, {"mean", {1.0}}, {"std", {0.0}}},
          "evaluate.scaling");
}

TEST(EvaluationMessages, ReportRoundTripsEachStatus) {
  auto ok = parse_evaluation_report(to_metadata(sample_report()));
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(ok->status, EvaluationStatus::ok);
  EXPECT_EQ(ok->loss, 0.3125);
  EXPECT_EQ(ok->accuracy, 0.875);
  EXPECT_EQ(ok->samples, 114u);
  EXPECT_TRUE(ok->message.empty());

  for (auto status : {EvaluationStatus::refused, EvaluationStatus::failed}) {
    EvaluationReport sent = sample_report();
    sent.status = status;
    sent.message = "site policy: evaluation is not allowed";
    const auto text = to_metadata(sent);
    EXPECT_EQ(json::parse(text).count("loss"), 0u) << text;  // no metrics without ok
    auto got = parse_evaluation_report(text);
    ASSERT_TRUE(got) << got.error().to_string();
    EXPECT_EQ(got->status, status);
    EXPECT_EQ(got->message, sent.message);
    EXPECT_EQ(got->samples, 0u);
  }
}

TEST(EvaluationMessages, ReportRefusesMalformedFieldsByName) {
  expect_refused(report_with("status", "maybe"), "unknown 'status' 'maybe'");
  expect_refused(report_with("loss", -1), "'loss'");
  expect_refused(report_with("loss", "NaN"), "'loss'");
  expect_refused(report_with("accuracy", 1.5), "'accuracy'");
  expect_refused(report_with("samples", 0), "'samples'");
  expect_refused(report_with("samples", -3), "'samples'");
  expect_refused(report_with("nonce", "xyz"), "'nonce'");
  expect_refused(report_with("round", 0), "'round'");
  expect_refused(report_with("message", "why"), "'message' is only for");
  expect_refused("[1,2]", "evaluation");
  expect_refused("{", "evaluation");
}

TEST(EvaluationMessages, RefusalNeedsWordsAndNoMetrics) {
  json refused = {{"run", 4}, {"round", 7}, {"nonce", kNonce}, {"status", "refused"}};
  expect_refused(refused.dump(), "missing 'message'");
  refused["message"] = "";
  expect_refused(refused.dump(), "needs a 'message'");
  refused["message"] = std::string(kMaxEvaluationMessage + 1, 'x');
  expect_refused(refused.dump(), "at most 1024 bytes");
  refused["message"] = "no";
  refused["accuracy"] = 0.5;
  expect_refused(refused.dump(), "carries no metrics");
}

TEST(EvaluationMessages, CutWordsAreWrittenAsValidJson) {
  // A message cut inside a UTF-8 character is written with a replacement character, not
  // thrown on (the client truncates its words to the limit).
  EvaluationReport sent = sample_report();
  sent.status = EvaluationStatus::failed;
  sent.message = "évaluation";
  sent.message.resize(1);  // the first byte of 'é' alone
  const auto text = to_metadata(sent);
  auto got = parse_evaluation_report(text);
  ASSERT_TRUE(got) << text;
  EXPECT_EQ(got->message, "\xEF\xBF\xBD");
}

TEST(EvaluationMessages, FramesCarryTheModelAndNoPayloadBack) {
  const std::vector<float> params = {0.25f, -1.5f, 3.0f};
  const auto bytes = encode_frame(MessageType::evaluate, to_metadata(sample_request()),
                                  std::as_bytes(std::span(params)));
  auto frame = decode_frame(bytes);
  ASSERT_TRUE(frame) << frame.error().to_string();
  EXPECT_EQ(frame->type, MessageType::evaluate);
  auto floats = payload_floats(frame->payload);
  ASSERT_TRUE(floats);
  EXPECT_EQ(std::vector<float>(floats->begin(), floats->end()), params);
  ASSERT_TRUE(parse_evaluate_request(frame->metadata));

  const auto answer = encode_frame(MessageType::evaluation, to_metadata(sample_report()));
  auto back = decode_frame(answer);
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->payload.empty());
  EXPECT_TRUE(parse_evaluation_report(back->metadata));
}

}  // namespace
}  // namespace fedcore::protocol
