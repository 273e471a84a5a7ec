#include "shared/protocol/messages.hpp"

#include <gtest/gtest.h>

namespace fedcore::protocol {
namespace {

TrainRequest sample_train() {
  TrainRequest m;
  m.run_id = 4;
  m.round = 17;
  m.nonce = "0123456789abcdef0123456789abcdef";
  m.model_spec = {{"type", "logreg"}};
  m.layout_fingerprint = "bb8f61515bf6ab05";
  m.settings = {2, 16, {{"kind", "sgd"}, {"lr", 0.1}}, 0.01f, 99};
  m.evaluate = true;
  return m;
}

UpdateReport sample_update() {
  UpdateReport m;
  m.run_id = 4;
  m.round = 17;
  m.nonce = "0123456789abcdef0123456789abcdef";
  m.layout_fingerprint = "bb8f61515bf6ab05";
  m.samples = 1204;
  m.loss = 0.41;
  m.accuracy = 0.9;
  m.train_seconds = 2.1;
  m.evaluation = LocalEvaluation{0.5, 0.88, 300};
  return m;
}

// SCAFFOLD (protocol 4): "scaffold" says the payload carries a control variate after the
// parameters; absent means it does not, and it never goes with a compressed encoding.
TEST(Messages, ScaffoldFlagRoundTripsAndRefusesCompression) {
  auto train = sample_train();
  EXPECT_FALSE(parse_train_request(to_metadata(train))->scaffold);
  train.scaffold = true;
  auto parsed_train = parse_train_request(to_metadata(train));
  ASSERT_TRUE(parsed_train) << parsed_train.error().message;
  EXPECT_TRUE(parsed_train->scaffold);
  auto update = sample_update();
  EXPECT_FALSE(parse_update_report(to_metadata(update))->scaffold);
  update.scaffold = true;
  auto parsed_update = parse_update_report(to_metadata(update));
  ASSERT_TRUE(parsed_update) << parsed_update.error().message;
  EXPECT_TRUE(parsed_update->scaffold);
  update.encoding = UpdateEncoding::int8;
  auto refused = parse_update_report(to_metadata(update));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("'scaffold' updates carry f32"), std::string::npos)
      << refused.error().message;
  EXPECT_GE(kProtocolVersion, kScaffoldProtocolVersion);
}

// FedBN (protocol 5): "site_batch_norm" asks the site to keep its own BatchNorm, in TRAIN and
// EVALUATE; absent means it does not, and only a set flag is written (older sites read
// nothing new).
TEST(Messages, SiteBatchNormFlagRoundTripsInTrainAndEvaluate) {
  auto train = sample_train();
  EXPECT_EQ(to_metadata(train).find("site_batch_norm"), std::string::npos);
  EXPECT_FALSE(parse_train_request(to_metadata(train))->site_batch_norm);
  train.site_batch_norm = true;
  auto parsed_train = parse_train_request(to_metadata(train));
  ASSERT_TRUE(parsed_train) << parsed_train.error().message;
  EXPECT_TRUE(parsed_train->site_batch_norm);
  EvaluateRequest eval;
  eval.run_id = 2;
  eval.round = 3;
  eval.nonce = std::string(32, 'a');
  eval.layout_fingerprint = std::string(16, 'b');
  EXPECT_FALSE(parse_evaluate_request(to_metadata(eval))->site_batch_norm);
  eval.site_batch_norm = true;
  auto parsed_eval = parse_evaluate_request(to_metadata(eval));
  ASSERT_TRUE(parsed_eval) << parsed_eval.error().message;
  EXPECT_TRUE(parsed_eval->site_batch_norm);
  EXPECT_EQ(kProtocolVersion, kSecureAdaptiveClipProtocolVersion);
}

TEST(Messages, ProtocolVersionsNegotiateDownToTheOlderPeer) {
  Hello hello{10, 0, {4}, 2, {"train"}, "fedcore-client 0.1.0"};
  auto h = parse_hello(to_metadata(hello));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->protocol_version, kProtocolVersion);
  // A client from before versions sends none: version 1.
  auto older = parse_hello(R"({"samples":10,"input_shape":[4],"num_classes":2})");
  ASSERT_TRUE(older);
  EXPECT_EQ(older->protocol_version, 1u);
  EXPECT_FALSE(parse_hello(R"({"samples":10,"input_shape":[4],"num_classes":2,"protocol":0})"));
  auto w = parse_welcome(R"({"client_id":"a","heartbeat_seconds":5})");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->protocol_version, 1u);
  w = parse_welcome(to_metadata(Welcome{"a", 5, 2}));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->protocol_version, 2u);
  EXPECT_EQ(negotiated_protocol(1), 1u);
  EXPECT_EQ(negotiated_protocol(kProtocolVersion), kProtocolVersion);
  EXPECT_EQ(negotiated_protocol(kProtocolVersion + 5), kProtocolVersion);  // a newer client
}

TEST(Messages, RoundTripThroughMetadata) {
  Hello hello{1204, 300, {30}, 2, {"train", "evaluate"}, "fedcore-client 0.1.0"};
  auto h = parse_hello(to_metadata(hello));
  ASSERT_TRUE(h) << h.error().to_string();
  EXPECT_EQ(h->samples, 1204u);
  EXPECT_EQ(h->input_shape, (std::vector<std::int64_t>{30}));
  EXPECT_EQ(h->capabilities.size(), 2u);

  auto t = parse_train_request(to_metadata(sample_train()));
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->round, 17);
  EXPECT_EQ(t->settings.batch_size, 16);
  EXPECT_EQ(t->settings.seed, 99u);
  EXPECT_EQ(t->model_spec.dump(), R"({"type":"logreg"})");
  EXPECT_TRUE(t->evaluate);

  auto u = parse_update_report(to_metadata(sample_update()));
  ASSERT_TRUE(u) << u.error().to_string();
  EXPECT_EQ(u->samples, 1204u);
  ASSERT_TRUE(u->evaluation);
  EXPECT_EQ(u->evaluation->samples, 300u);

  auto w = parse_welcome(to_metadata(Welcome{"hospital-3", 15}));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->client_id, "hospital-3");
  auto e = parse_error_message(to_metadata(ErrorMessage{"invalid_argument", "bad"}));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "invalid_argument");
}

TEST(Messages, UpdateRejectsBadFieldsByName) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"round":17,"nonce":"0123456789abcdef0123456789abcdef","layout":"bb8f61515bf6ab05","samples":5,"loss":0.1,"accuracy":0.5,"train_seconds":1})",
       "missing 'run'"},
      {R"({"run":1,"round":-1,"nonce":"0123456789abcdef0123456789abcdef","layout":"bb8f61515bf6ab05","samples":5,"loss":0.1,"accuracy":0.5,"train_seconds":1})",
       "'round'"},
      {R"({"run":1,"round":1,"nonce":"XYZ","layout":"bb8f61515bf6ab05","samples":5,"loss":0.1,"accuracy":0.5,"train_seconds":1})",
       "'nonce'"},
      {R"({"run":1,"round":1,"nonce":"0123456789abcdef0123456789abcdef","layout":"bb8f61515bf6ab05","samples":0,"loss":0.1,"accuracy":0.5,"train_seconds":1})",
       "'samples'"},
      {R"({"run":1,"round":1,"nonce":"0123456789abcdef0123456789abcdef","layout":"bb8f61515bf6ab05","samples":18446744073709551615,"loss":0.1,"accuracy":0.5,"train_seconds":1})",
       "'samples'"},
      {R"({"run":1,"round":1,"nonce":"0123456789abcdef0123456789abcdef","layout":"bb8f61515bf6ab05","samples":5,"loss":"low","accuracy":0.5,"train_seconds":1})",
       "'loss'"},
      {R"({"run":1,"round":1,"nonce":"0123456789abcdef0123456789abcdef","layout":"bb8f61515bf6ab05","samples":5,"loss":0.1,"accuracy":1.5,"train_seconds":1})",
       "'accuracy'"},
      {R"({"run":1,"round":1,"nonce":"0123456789abcdef0123456789abcdef","layout":"bb8f61515bf6ab05","samples":5,"loss":0.1,"accuracy":0.5,"train_seconds":1,"evaluation":{"loss":1}})",
       "'accuracy'"},
      {R"([1])", "JSON object"},
  };
  for (const auto& [metadata, fragment] : cases) {
    auto u = parse_update_report(metadata);
    ASSERT_FALSE(u) << metadata;
    EXPECT_EQ(u.error().code, errc::invalid_argument);
    EXPECT_NE(u.error().message.find(fragment), std::string::npos) << u.error().message;
  }
}

TEST(Messages, HelloAndWelcomeValidateShapesAndIds) {
  EXPECT_FALSE(parse_hello(R"({"samples":10,"input_shape":[0],"num_classes":2})"));
  EXPECT_FALSE(parse_hello(R"({"samples":10,"input_shape":[28,28,1],"num_classes":1})"));
  EXPECT_FALSE(
      parse_hello(R"({"samples":10,"input_shape":[28,28,1],"num_classes":10,"capabilities":[1]})"));
  EXPECT_TRUE(parse_hello(
      R"({"samples":10,"input_shape":[28,28,1],"num_classes":10,"future_field":true})"));
  EXPECT_FALSE(parse_welcome(R"({"client_id":"../etc","heartbeat_seconds":15})"));
  EXPECT_TRUE(is_valid_client_id("hospital_3.eu-west"));
  EXPECT_FALSE(is_valid_client_id(""));
  EXPECT_FALSE(is_valid_client_id("a b"));
  EXPECT_FALSE(is_valid_client_id(std::string(65, 'a')));
}

}  // namespace
}  // namespace fedcore::protocol
