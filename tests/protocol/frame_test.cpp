#include "shared/protocol/frame.hpp"

#include <cstring>

#include <gtest/gtest.h>

#include "shared/protocol/metadata.hpp"

namespace fedcore::protocol {
namespace {

std::vector<std::byte> floats_as_bytes(const std::vector<float>& values) {
  std::vector<std::byte> out(values.size() * sizeof(float));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TEST(Frame, RoundTripsEveryMessageType) {
  const auto payload = floats_as_bytes({1.5f, -2.0f, 3.25f});
  for (std::uint16_t t : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 32, 33}) {
    const auto type = static_cast<MessageType>(t);
    ASSERT_TRUE(is_known_message_type(t)) << t;
    ASSERT_NE(message_type_name(type), "unknown") << t;
    const auto bytes = encode_frame(type, R"({"round":3,"nonce":"ab"})", payload);
    ASSERT_EQ(bytes.size(), kFrameHeaderSize + 24 + payload.size());
    auto frame = decode_frame(bytes);
    ASSERT_TRUE(frame) << frame.error().to_string();
    EXPECT_EQ(frame->type, type);
    EXPECT_EQ(frame->metadata, R"({"round":3,"nonce":"ab"})");
    EXPECT_EQ(frame->payload, payload);
    auto values = payload_floats(frame->payload);
    ASSERT_TRUE(values);
    EXPECT_EQ(values->size(), 3u);
    EXPECT_EQ((*values)[1], -2.0f);
  }
}

TEST(Frame, HeaderLayoutIsTheDocumentedOne) {
  const auto head = encode_header({MessageType::update, 0x0102, 0, 0x0a0b0c0d0e0fULL});
  const unsigned char expected[kFrameHeaderSize] = {'F',  'C',  'F',  '1',  1,    0,    5, 0,
                                                    0x02, 0x01, 0,    0,    0,    0,    0, 0,
                                                    0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 0, 0};
  EXPECT_EQ(std::memcmp(head.data(), expected, kFrameHeaderSize), 0);
}

TEST(Frame, EveryTruncationPointIsOutOfRange) {
  const auto bytes = encode_frame(MessageType::train, R"({"a":1})", floats_as_bytes({1, 2, 3, 4}));
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto frame = decode_frame(std::span(bytes).first(n));
    ASSERT_FALSE(frame) << "length " << n;
    EXPECT_EQ(frame.error().code, errc::out_of_range)
        << "length " << n << ": " << frame.error().message;
  }
}

TEST(Frame, TrailingBytesAreRejected) {
  auto bytes = encode_frame(MessageType::heartbeat, "{}");
  bytes.push_back(std::byte{0});
  EXPECT_EQ(decode_frame(bytes).error().code, errc::invalid_argument);
}

TEST(Frame, WrongMagicIsDataLoss) {
  auto bytes = encode_frame(MessageType::hello, "{}");
  bytes[0] = std::byte{'G'};
  auto frame = decode_frame(bytes);
  ASSERT_FALSE(frame);
  EXPECT_EQ(frame.error().code, errc::data_loss);
  EXPECT_NE(frame.error().message.find("magic"), std::string::npos);
}

TEST(Frame, OtherVersionIsUnimplemented) {
  auto bytes = encode_frame(MessageType::hello, "{}");
  bytes[4] = std::byte{2};
  auto frame = decode_frame(bytes);
  ASSERT_FALSE(frame);
  EXPECT_EQ(frame.error().code, errc::unimplemented);
  EXPECT_NE(frame.error().message.find("version 2"), std::string::npos);
}

TEST(Frame, UnknownTypeAndNonZeroFlagsAreInvalid) {
  auto bytes = encode_frame(MessageType::hello, "{}");
  bytes[6] = std::byte{0};
  EXPECT_EQ(decode_frame(bytes).error().code, errc::invalid_argument);
  for (int gap : {12, 15, 19, 31, 34, 77}) {  // between and after the documented types
    bytes[6] = std::byte(gap);
    EXPECT_EQ(decode_frame(bytes).error().code, errc::invalid_argument) << gap;
  }
  bytes = encode_frame(MessageType::hello, "{}");
  bytes[12] = std::byte{1};
  EXPECT_EQ(decode_frame(bytes).error().code, errc::invalid_argument);
}

TEST(Frame, OversizedLengthsAreRefusedFromTheHeaderAlone) {
  const FrameLimits limits{.max_metadata_bytes = 100, .max_payload_bytes = 1000};
  // Only the 24 header bytes exist: the refusal must come before any attempt to read or
  // allocate what the header announces.
  auto huge_payload = encode_header({MessageType::update, 2, 0, ~std::uint64_t{0}});
  auto header = decode_header(huge_payload, limits);
  ASSERT_FALSE(header);
  EXPECT_EQ(header.error().code, errc::resource_exhausted);
  EXPECT_NE(header.error().message.find("payload"), std::string::npos);
  auto huge_metadata = encode_header({MessageType::update, 101, 0, 0});
  header = decode_header(huge_metadata, limits);
  ASSERT_FALSE(header);
  EXPECT_EQ(header.error().code, errc::resource_exhausted);
  EXPECT_NE(header.error().message.find("metadata"), std::string::npos);
  EXPECT_TRUE(decode_header(encode_header({MessageType::update, 100, 0, 1000}), limits));
}

TEST(Frame, MetadataIsCarriedUnparsed) {
  // Parsing is the message handler's job (parse_metadata), done once per frame.
  auto frame = decode_frame(encode_frame(MessageType::heartbeat, "not json"));
  ASSERT_TRUE(frame) << frame.error().to_string();
  EXPECT_EQ(frame->metadata, "not json");
}

TEST(Metadata, GarbageIsInvalidArgumentWithItsOffset) {
  struct Case {
    const char* metadata;
    const char* fragment;
  };
  const Case cases[] = {{"{\"a\":", "not valid JSON"}, {"\xff\xfe", "not valid JSON"},
                        {"[1,2]", "JSON object"},      {"42", "JSON object"},
                        {"", "not valid JSON"},        {"{\"a\":1} trailing", "byte"}};
  for (const auto& c : cases) {
    auto parsed = parse_metadata(c.metadata);
    ASSERT_FALSE(parsed) << c.metadata;
    EXPECT_EQ(parsed.error().code, errc::invalid_argument);
    EXPECT_NE(parsed.error().message.find(c.fragment), std::string::npos) << parsed.error().message;
  }
  auto good = parse_metadata(R"({"round":3})");
  ASSERT_TRUE(good);
  EXPECT_EQ((*good)["round"], 3);
}

TEST(Frame, PayloadFloatsNeedWholeAlignedValues) {
  std::vector<std::byte> seven(7);
  EXPECT_EQ(payload_floats(seven).error().code, errc::invalid_argument);
  std::vector<std::byte> eight(9);
  EXPECT_EQ(payload_floats(std::span(eight).subspan(1, 8)).error().code, errc::invalid_argument);
  EXPECT_TRUE(payload_floats(std::span(eight).first(8)));
  EXPECT_EQ(payload_floats({})->size(), 0u);
}

// Deterministic corruption sweep: flipping any single bit of a valid frame either still
// decodes (a bit inside the payload or a harmless metadata character) or yields one of
// the documented errors. Never a crash, never an allocation of an announced length.
TEST(Frame, SingleBitFlipsNeverCrashAndYieldDocumentedErrors) {
  const auto bytes =
      encode_frame(MessageType::update, R"({"run":1,"round":2})", floats_as_bytes({1, 2}));
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto corrupt = bytes;
      corrupt[i] ^= std::byte(1u << bit);
      auto frame = decode_frame(corrupt);
      if (!frame) {
        const auto code = frame.error().code;
        EXPECT_TRUE(code == errc::data_loss || code == errc::unimplemented ||
                    code == errc::invalid_argument || code == errc::resource_exhausted ||
                    code == errc::out_of_range)
            << "byte " << i << " bit " << bit << ": " << frame.error().to_string();
      }
    }
  }
}

}  // namespace
}  // namespace fedcore::protocol
