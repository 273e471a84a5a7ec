// The collective metadata codec: its fast writer prints what nlohmann prints, its reader
// takes that and any other valid rendering, and refuses what is not an envelope.
#include "shared/collective/envelope_codec.hpp"

#include <cstdint>
#include <limits>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace fedcore::collective {
namespace {

Envelope sample() {
  return {"job-7", 123456789012ULL, OpType::allreduce, 42, 1ULL << 40, 17, 4096};
}

std::string library_dump(const Envelope& e, std::uint64_t n) {
  return nlohmann::json{
      {"job", e.job},     {"seq", e.seq},         {"op", static_cast<int>(e.op)}, {"tag", e.tag},
      {"bytes", e.bytes}, {"segment", e.segment}, {"length", e.length},           {"n", n}}
      .dump();
}

TEST(EnvelopeCodec, TheFastWriterPrintsWhatTheLibraryPrints) {
  std::mt19937_64 rng(7);
  const std::uint64_t max64 = std::numeric_limits<std::uint64_t>::max();
  for (int i = 0; i < 2000; ++i) {
    Envelope e{"j" + std::to_string(rng() % 1000),
               i == 0 ? max64 : rng(),
               static_cast<OpType>(1 + rng() % 6),
               static_cast<std::uint32_t>(i == 1 ? 0xffffffffu : rng()),
               rng() >> (rng() % 64),
               static_cast<std::uint32_t>(rng()),
               i == 2 ? 0 : rng() >> 20};
    const std::uint64_t n = rng() >> (rng() % 64);
    const std::string text = encode_envelope(e, n);
    ASSERT_EQ(text, library_dump(e, n));
    auto back = decode_envelope(text);
    ASSERT_TRUE(back) << back.error().to_string();
    EXPECT_EQ(back->envelope, e);
    EXPECT_EQ(back->n, n);
    EXPECT_FALSE(back->doorbell);
  }
}

TEST(EnvelopeCodec, AJobIdThatNeedsEscapingTakesTheLibraryPathBothWays) {
  Envelope e = sample();
  e.job = "a \"quoted\" \\ job\twith é";
  const std::string text = encode_envelope(e, 5);
  EXPECT_EQ(text, library_dump(e, 5));
  auto back = decode_envelope(text);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->envelope, e);
  EXPECT_EQ(back->n, 5u);
}

TEST(EnvelopeCodec, AnyValidRenderingDecodes) {
  const Envelope e = sample();
  // Other key order and whitespace: not the fast path's form, still the same envelope.
  const std::string text =
      R"({ "n": 9, "job": "job-7", "seq": 123456789012, "op": 1, "tag": 42,
           "bytes": 1099511627776, "segment": 17, "length": 4096 })";
  auto back = decode_envelope(text);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->envelope, e);
  EXPECT_EQ(back->n, 9u);
}

TEST(EnvelopeCodec, TheDoorbellIsNoMessage) {
  auto bell = decode_envelope(kDoorbellMetadata);
  ASSERT_TRUE(bell);
  EXPECT_TRUE(bell->doorbell);
}

TEST(EnvelopeCodec, WhatIsNotAnEnvelopeIsDataLoss) {
  const std::string good = encode_envelope(sample(), 3);
  for (
      const std::string& bad : {
          std::string("not json"),
          std::string("[1,2]"),
          good.substr(0, good.size() - 1),                     // cut short
          std::string(R"({"bytes":1,"job":"j","length":1})"),  // fields missing
          std::string(
              R"({"bytes":-1,"job":"j","length":1,"n":1,"op":1,"segment":0,"seq":1,"tag":0})"),
          std::string(R"({"bytes":1,"job":7,"length":1,"n":1,"op":1,"segment":0,"seq":1,"tag":0})"),
          std::string(
              R"({"bytes":1,"job":"j","length":1,"n":1,"op":1,"segment":0,"seq":1,"tag":4294967296})"),
          std::string(
              R"({"bytes":007,"job":"j","length":1,"n":1,"op":1,"segment":0,"seq":1,"tag":0})"),
      }) {
    auto decoded = decode_envelope(bad);
    ASSERT_FALSE(decoded) << bad;
    EXPECT_EQ(decoded.error().code, errc::data_loss) << bad;
  }
}

}  // namespace
}  // namespace fedcore::collective
