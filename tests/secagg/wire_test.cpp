// The consistency check's messages on the wire: what is sent is what is read back, and
// malformed or oversized fields are refused with the field's name.
#include "shared/secagg/wire.hpp"

#include <gtest/gtest.h>

namespace fedcore::secagg {
namespace {

const Envelope kEnvelope{4, 2, std::string(32, 'a')};

TEST(SecAggWire, TheConsistencyMessagesRoundTrip) {
  auto list = parse_survivor_list(to_metadata(kEnvelope, SurvivorList{{"site-a", "site-b"}}));
  ASSERT_TRUE(list) << list.error().message;
  EXPECT_EQ(list->envelope.round, 2);
  EXPECT_EQ(list->body.survivors, (std::vector<std::string>{"site-a", "site-b"}));

  auto signature = parse_survivor_signature(to_metadata(kEnvelope, SurvivorSignature{{1, 2, 255}}));
  ASSERT_TRUE(signature) << signature.error().message;
  EXPECT_EQ(signature->body.signature, (Bytes{1, 2, 255}));

  UnmaskRequest request{{"site-a", "site-b", "site-c"}, {"site-d"}, {{"site-b", {7, 8}}}};
  auto read = parse_unmask_request(to_metadata(kEnvelope, request));
  ASSERT_TRUE(read) << read.error().message;
  EXPECT_EQ(read->body.survivors, request.survivors);
  EXPECT_EQ(read->body.dropped, request.dropped);
  ASSERT_EQ(read->body.signatures.size(), 1u);
  EXPECT_EQ(read->body.signatures[0].client_id, "site-b");
  EXPECT_EQ(read->body.signatures[0].signature, (Bytes{7, 8}));
}

TEST(SecAggWire, ThePlansMinSurvivorsTravelsAndIsBoundedByTheClients) {
  NeighbourKeys keys;
  keys.plan = plan_round(10, {}).value();
  auto read = parse_neighbour_keys(to_metadata(kEnvelope, keys));
  ASSERT_TRUE(read) << read.error().message;
  EXPECT_EQ(read->body.plan.min_survivors, 0u);  // absent: the threshold
  EXPECT_EQ(required_survivors(read->body.plan), read->body.plan.threshold);
  keys.plan.min_survivors = 8;
  read = parse_neighbour_keys(to_metadata(kEnvelope, keys));
  ASSERT_TRUE(read) << read.error().message;
  EXPECT_EQ(required_survivors(read->body.plan), 8u);
  keys.plan.min_survivors = 11;
  auto refused = parse_neighbour_keys(to_metadata(kEnvelope, keys));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("min_survivors"), std::string::npos);
}

TEST(SecAggWire, MalformedConsistencyMessagesAreRefusedByField) {
  const std::string envelope = R"("run":4,"round":2,"nonce":")" + std::string(32, 'a') + R"(")";
  auto no_list = parse_survivor_list("{" + envelope + "}");
  ASSERT_FALSE(no_list);
  EXPECT_NE(no_list.error().message.find("survivors"), std::string::npos);
  auto not_ids = parse_survivor_list("{" + envelope + R"(,"survivors":[1,2]})");
  ASSERT_FALSE(not_ids);
  EXPECT_EQ(not_ids.error().code, errc::invalid_argument);
  auto odd_hex = parse_survivor_signature("{" + envelope + R"(,"signature":"abc"})");
  ASSERT_FALSE(odd_hex);
  auto too_long = parse_survivor_signature("{" + envelope + R"(,"signature":")" +
                                           std::string(2050, 'a') + R"("})");
  ASSERT_FALSE(too_long);
  EXPECT_NE(too_long.error().message.find("signature"), std::string::npos);
  auto no_signatures = parse_unmask_request("{" + envelope + R"(,"survivors":[],"dropped":[]})");
  ASSERT_FALSE(no_signatures);
  EXPECT_NE(no_signatures.error().message.find("signatures"), std::string::npos);
  std::string many = "[";
  for (int i = 0; i < 1025; ++i) {
    many += (i ? ",\"" : "\"") + std::to_string(i) + "\"";
  }
  many += "]";
  EXPECT_FALSE(parse_survivor_list("{" + envelope + R"(,"survivors":)" + many + "}"));
}

}  // namespace
}  // namespace fedcore::secagg
