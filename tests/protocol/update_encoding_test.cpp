// Compressed updates: each encoding's bytes, its error bound, and the refusal of every
// malformed payload (shared/protocol/update_encoding.hpp).
#include "shared/protocol/update_encoding.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <span>

#include <gtest/gtest.h>

#include "shared/protocol/messages.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::protocol {
namespace {

std::vector<float> normal(std::size_t n, std::uint64_t seed, double scale = 0.01) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = static_cast<float>(scale * rng.normal());
  }
  return v;
}

std::vector<float> decode(UpdateEncoding e, const std::vector<std::byte>& bytes,
                          const std::vector<float>& global) {
  std::vector<float> out;
  auto ok = decode_step(e, bytes, global, out);
  EXPECT_TRUE(ok) << ok.error().message;
  return out;
}

// Values from the IEEE 754 binary16 tables: 1.0 = 0x3c00, -2 = 0xc000, 65504 = 0x7bff (the
// largest), 2^-14 = 0x0400 (the smallest normal), 2^-24 = 0x0001 (the smallest subnormal),
// 1/3 rounds to 0x3555; 65520 rounds (to even) to infinity.
TEST(UpdateEncoding, HalfPrecisionMatchesTheStandardsTable) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(float_to_half(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::nanf("")))));
  // Every finite half survives the round trip.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(static_cast<std::uint16_t>(h));
    if (std::isfinite(f)) {
      ASSERT_EQ(float_to_half(f), h) << h;
    }
  }
}

TEST(UpdateEncoding, F16IsHalfTheBytesWithinHalfAnUlp) {
  const auto global = normal(1001, 1, 1.0);
  const auto step = normal(1001, 2);
  Rng rng(3);
  const auto bytes = encode_step(step, {UpdateEncoding::f16}, rng);
  EXPECT_EQ(bytes.size(), 2004u);  // 2 x 1001, padded to a multiple of 4
  EXPECT_EQ(encoded_size(1001, {UpdateEncoding::f16}), bytes.size());
  const auto params = decode(UpdateEncoding::f16, bytes, global);
  for (std::size_t i = 0; i < step.size(); ++i) {
    const double got = double(params[i]) - global[i];
    EXPECT_NEAR(got, step[i], std::abs(step[i]) * std::ldexp(1.0, -11) + 1e-7) << i;
  }
}

// int8: |error| <= one quantum (scale = max|x| / 127) per value, and unbiased: the mean of
// many encodings of the same step is the step.
TEST(UpdateEncoding, Int8IsAQuarterOfTheBytesWithinOneQuantumAndUnbiased) {
  const std::size_t n = 1000;
  const std::vector<float> global(n, 0.5f);
  const auto step = normal(n, 4);
  const CompressionTerms terms{UpdateEncoding::int8, 256, 0};
  Rng rng(5);
  const auto bytes = encode_step(step, terms, rng);
  EXPECT_EQ(bytes.size(), 4u + 4 * 4 + 1000);  // block size, 4 scales, 1000 values
  EXPECT_LE(double(bytes.size()) / (4 * n), 0.27);
  std::vector<double> mean(n, 0.0);
  const int draws = 400;
  for (int d = 0; d < draws; ++d) {
    const auto params = decode(UpdateEncoding::int8, encode_step(step, terms, rng), global);
    for (std::size_t i = 0; i < n; ++i) {
      const double got = double(params[i]) - global[i];
      float largest = 0;
      for (std::size_t j = i / 256 * 256; j < std::min(n, i / 256 * 256 + 256); ++j) {
        largest = std::max(largest, std::abs(step[j]));
      }
      ASSERT_LE(std::abs(got - step[i]), largest / 127.0 * 1.0001 + 1e-7) << i;
      mean[i] += got / draws;
    }
  }
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::abs(mean[i] - step[i]));
  }
  // One quantum is about 0.03 / 127 = 2.4e-4; 400 draws bring the mean within ~1.2e-5.
  EXPECT_LT(worst, 4e-5);
}

// The global model as f16 for TRAIN (compression.down): half the bytes, every value within
// half an ulp of binary16, and a payload of another size refused.
TEST(UpdateEncoding, AModelGoesDownAsF16AndComesBackWithinHalfAnUlp) {
  const auto model = normal(1001, 6, 1.0);
  const auto words = encode_model_f16(model);
  EXPECT_EQ(words.size() * 4, 2004u);
  const auto bytes = std::as_bytes(std::span(words));
  auto back = decode_model_f16(bytes, model.size());
  ASSERT_TRUE(back) << back.error().message;
  for (std::size_t i = 0; i < model.size(); ++i) {
    EXPECT_NEAR((*back)[i], model[i], std::abs(model[i]) * std::ldexp(1.0, -11) + 1e-7) << i;
  }
  EXPECT_FALSE(decode_model_f16(bytes, 1500));
  EXPECT_FALSE(decode_model_f16(bytes.first(2000), model.size()));
}

TEST(UpdateEncoding, TopKSendsTheLargestEntriesAndKeepsTheRestAsResidual) {
  const std::vector<float> global{1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const std::vector<float> step{0.1f, -5, 0.2f, 3, 0, 0, -0.3f, 0, 0.05f, 4};
  Rng rng(1);
  std::vector<float> residual;
  const auto bytes = encode_step(step, {UpdateEncoding::topk, 256, 0.3}, rng, &residual);  // k = 3
  EXPECT_EQ(bytes.size(), 4u + 8 * 3);
  const auto params = decode(UpdateEncoding::topk, bytes, global);
  EXPECT_EQ(params, (std::vector<float>{1, -4, 1, 4, 1, 1, 1, 1, 1, 5}));
  EXPECT_EQ(residual, (std::vector<float>{0.1f, 0, 0.2f, 0, 0, 0, -0.3f, 0, 0.05f, 0}));
  EXPECT_EQ(topk_count(1000, 0.01), 10u);
  EXPECT_EQ(topk_count(5, 0.01), 1u);
}

// Every payload that does not match its encoding exactly is refused, saying why.
// A StepDecoder decodes any range on its own, in any order, to the values decode_step gives
// for the whole model: ranges that start and end inside int8 blocks and between topk
// entries, one value, and the last values.
TEST(UpdateEncoding, StepDecoderDecodesAnyRangeAsTheWholeDecode) {
  const std::size_t n = 5000;
  const auto global = normal(n, 3, 1.0);
  const auto step = normal(n, 4);
  for (const auto encoding : {UpdateEncoding::f16, UpdateEncoding::int8, UpdateEncoding::topk}) {
    CompressionTerms terms;
    terms.up = encoding;
    terms.block = 37;
    terms.topk_fraction = 0.03;
    Rng rng(9);
    std::vector<float> residual;
    const auto payload = encode_step(step, terms, rng, &residual);
    const auto whole = decode(encoding, payload, global);
    auto decoder = StepDecoder::open(encoding, payload, n);
    ASSERT_TRUE(decoder) << decoder.error().message;
    EXPECT_EQ(decoder->size(), n);
    for (const auto& [begin, length] : std::vector<std::pair<std::size_t, std::size_t>>{
             {4000, 1000}, {0, 1}, {36, 2}, {100, 1234}, {4999, 1}, {0, n}}) {
      std::vector<float> out(length);
      decoder->decode_range(begin, std::span<const float>(global).subspan(begin, length), out);
      for (std::size_t i = 0; i < length; ++i) {
        ASSERT_EQ(out[i], whole[begin + i]) << encoding_name(encoding) << " at " << begin + i;
      }
    }
  }
  // What decode_step refuses, open() refuses: a bad payload never reaches a fold.
  auto payload =
      encode_step(step, CompressionTerms{UpdateEncoding::f16}, *std::make_unique<Rng>(1));
  const std::uint16_t infinity = 0x7c00;
  std::memcpy(payload.data() + 2 * 17, &infinity, 2);
  auto refused = StepDecoder::open(UpdateEncoding::f16, payload, n);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("non-finite step at parameter 17"), std::string::npos)
      << refused.error().message;
}

TEST(UpdateEncoding, RefusesMalformedPayloads) {
  const std::vector<float> global(10, 0.0f);
  const auto refused = [&](UpdateEncoding e, const std::vector<std::byte>& bytes) {
    std::vector<float> out;
    auto r = decode_step(e, bytes, global, out);
    return r ? std::string() : r.error().message;
  };
  Rng rng(1);
  const auto step = normal(10, 9);
  auto f16 = encode_step(step, {UpdateEncoding::f16}, rng);
  EXPECT_EQ(refused(UpdateEncoding::f16, std::vector<std::byte>(f16.begin(), f16.end() - 4)),
            "update encoding f16: 16 bytes for 10 parameters; expected 20");
  f16[0] = std::byte{0x00};
  f16[1] = std::byte{0x7c};  // +infinity
  EXPECT_EQ(refused(UpdateEncoding::f16, f16),
            "update encoding f16: a non-finite step at parameter 0");
  auto padded = encode_step(step, {UpdateEncoding::int8, 16, 0}, rng);  // 18 bytes + 2
  ASSERT_EQ(padded.size(), 20u);
  EXPECT_EQ(refused(UpdateEncoding::int8, padded), "");
  padded.back() = std::byte{1};  // padding that is not zero
  EXPECT_NE(refused(UpdateEncoding::int8, padded), "");

  auto int8 = encode_step(step, {UpdateEncoding::int8, 16, 0}, rng);
  auto bad_block = int8;
  bad_block[0] = std::byte{8};
  EXPECT_EQ(refused(UpdateEncoding::int8, bad_block),
            "update encoding int8: block size 8 outside [16, 65536]");
  auto bad_scale = int8;
  const float negative = -1.0f;
  std::memcpy(bad_scale.data() + 4, &negative, 4);
  EXPECT_EQ(refused(UpdateEncoding::int8, bad_scale),
            "update encoding int8: block 0 has a negative or non-finite scale");

  auto topk = encode_step(step, {UpdateEncoding::topk, 256, 0.3}, rng);
  auto out_of_range = topk;
  const std::uint32_t index = 10;
  std::memcpy(out_of_range.data() + 4 + 8, &index, 4);  // the third index
  EXPECT_EQ(refused(UpdateEncoding::topk, out_of_range),
            "update encoding topk: index 10 (entry 2) is out of range or not above the one "
            "before");
  auto repeated = topk;
  std::memcpy(repeated.data() + 8, repeated.data() + 4, 4);  // the second index = the first
  EXPECT_NE(refused(UpdateEncoding::topk, repeated).find("not above the one before"),
            std::string::npos);
  auto too_many = topk;
  const std::uint32_t k = 11;
  std::memcpy(too_many.data(), &k, 4);
  EXPECT_NE(refused(UpdateEncoding::topk, too_many).find("announcing 11 entries of 10"),
            std::string::npos);
  EXPECT_NE(refused(UpdateEncoding::topk, {}), "");
}

TEST(UpdateEncoding, TrainAndUpdateCarryTheirEncodingAndOlderPeersSeeNone) {
  TrainRequest request;
  request.run_id = 1;
  request.round = 2;
  request.nonce = std::string(32, 'a');
  request.layout_fingerprint = std::string(16, 'b');
  request.compression = {UpdateEncoding::int8, 512, 0.01};
  auto parsed = parse_train_request(to_metadata(request));
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->compression, request.compression);
  request.compression.down = UpdateEncoding::f16;
  request.compression.parameters = 1234;
  parsed = parse_train_request(to_metadata(request));
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->compression, request.compression);
  request.compression = {};
  const auto plain = to_metadata(request);
  EXPECT_EQ(plain.find("compression"), std::string::npos);  // what a protocol-2 peer saw
  EXPECT_EQ(parse_train_request(plain)->compression.up, UpdateEncoding::f32);

  UpdateReport report;
  report.run_id = 1;
  report.round = 2;
  report.nonce = std::string(32, 'a');
  report.layout_fingerprint = std::string(16, 'b');
  report.samples = 3;
  report.encoding = UpdateEncoding::topk;
  auto back = parse_update_report(to_metadata(report));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->encoding, UpdateEncoding::topk);
  auto text = to_metadata(report);
  text.replace(text.find("\"topk\""), 6, "\"zip\"");
  auto unknown = parse_update_report(text);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("'encoding' must be f32, f16, int8 or topk"),
            std::string::npos);
}

}  // namespace
}  // namespace fedcore::protocol
