#include "shared/model/param_io.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "shared/model/model.hpp"
#include "shared/model/spec.hpp"
#include "shared/util/checksum.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::model {
namespace {

Model small_model(
    const char* json = R"({"type":"mlp","hidden":[5],"input_shape":[4],"num_classes":3})") {
  auto model = build_model(*parse_model_spec(std::string_view(json)));
  model->initialize(3);
  return std::move(*model);
}

TEST(ParamIo, EncodeDecodeRoundTrips) {
  Model model = small_model();
  const auto bytes = encode_params(model.layout(), model.params(), R"({"round":3})");
  auto bundle = decode_params(bytes);
  ASSERT_TRUE(bundle) << bundle.error().to_string();
  EXPECT_EQ(bundle->layout, model.layout());
  EXPECT_TRUE(std::equal(bundle->params.begin(), bundle->params.end(), model.params().begin()));
  EXPECT_EQ(bundle->metadata_json, R"({"round":3})");
}

// The pieces a checkpoint is written from are the encoded file, cut: the head, the
// parameters where they lie (no copy), the CRC of everything before it; and a file
// written from the pieces reads back.
TEST(ParamIo, ThePiecesAreTheFileAndItsCrcWithoutACopyOfTheParameters) {
  Model model = small_model();
  const auto whole = encode_params(model.layout(), model.params(), R"({"round":4})");
  const auto pieces = encode_params_in_parts(model.layout(), model.params(), R"({"round":4})");
  EXPECT_EQ(pieces.body.data(), reinterpret_cast<const std::byte*>(model.params().data()));
  std::vector<std::byte> joined;
  for (const auto part : pieces.parts()) {
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, whole);
  EXPECT_EQ(pieces.size(), whole.size());
  EXPECT_EQ(pieces.crc, crc32(std::span<const std::byte>(whole).first(whole.size() - 4)));
  testing::TempDir dir;
  const auto path = dir.path("pieces.fcp");
  ASSERT_TRUE(write_file_atomically(path, pieces.parts()));
  auto loaded = load_params(path);
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  EXPECT_EQ(loaded->metadata_json, R"({"round":4})");
  EXPECT_TRUE(std::equal(loaded->params.begin(), loaded->params.end(), model.params().begin()));
}

TEST(ParamIo, EveryTruncationIsRejected) {
  Model model = small_model();
  const auto bytes = encode_params(model.layout(), model.params());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto bundle = decode_params(std::span(bytes).first(n));
    ASSERT_FALSE(bundle) << "length " << n;
    EXPECT_EQ(bundle.error().code, errc::out_of_range)
        << "length " << n << ": " << bundle.error().message;
  }
}

TEST(ParamIo, AnyFlippedByteIsDetected) {
  Model model = small_model();
  const auto bytes = encode_params(model.layout(), model.params());
  for (std::size_t i = 0; i < bytes.size(); i += 7) {
    auto corrupt = bytes;
    corrupt[i] ^= std::byte{0x40};
    auto bundle = decode_params(corrupt);
    ASSERT_FALSE(bundle) << "byte " << i;
  }
  auto corrupt = bytes;
  corrupt[bytes.size() - 20] ^= std::byte{1};  // in the payload
  EXPECT_EQ(decode_params(corrupt).error().code, errc::data_loss);
  corrupt = bytes;
  corrupt[0] = std::byte{'X'};
  EXPECT_EQ(decode_params(corrupt).error().code, errc::data_loss);
  EXPECT_NE(decode_params(corrupt).error().message.find("magic"), std::string::npos);
  corrupt = bytes;
  corrupt[8] = std::byte{9};  // version 9
  EXPECT_EQ(decode_params(corrupt).error().code, errc::unimplemented);
}

TEST(ParamIo, HugeAnnouncedLengthsAreRefusedBeforeAllocating) {
  Model model = small_model();
  auto bytes = encode_params(model.layout(), model.params());
  bytes[23] = std::byte{0x7f};  // parameter count near 2^63
  EXPECT_EQ(decode_params(bytes).error().code, errc::resource_exhausted);
}

TEST(ParamIo, SaveLoadIntoAModelAndRefuseAnotherLayout) {
  testing::TempDir dir;
  Model model = small_model();
  const auto path = dir.path("model.fcp");
  ASSERT_TRUE(save_params(path, model.layout(), model.params(), "{}"));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  Model other = small_model();
  other.initialize(99);
  ASSERT_TRUE(load_params_into(path, other));
  EXPECT_TRUE(std::equal(other.params().begin(), other.params().end(), model.params().begin()));

  Model different = small_model(R"({"type":"mlp","hidden":[6],"input_shape":[4],"num_classes":3})");
  auto refused = load_params_into(path, different);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::failed_precondition);
  auto missing = load_params(dir.path("nope.fcp"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::not_found);
  EXPECT_NE(missing.error().message.find("nope.fcp"), std::string::npos);
}

TEST(ParamIo, NpyExportWritesValidNumpyFiles) {
  testing::TempDir dir;
  Model model = small_model();
  ASSERT_TRUE(export_npy(dir.path("npy"), model.layout(), model.params()));
  for (const auto& entry : model.layout().entries()) {
    std::ifstream in(dir.path("npy/" + entry.name + ".npy"), std::ios::binary);
    ASSERT_TRUE(in) << entry.name;
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    const std::size_t header_len =
        static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    EXPECT_EQ((10 + header_len) % 64, 0u);
    const std::string header = bytes.substr(10, header_len);
    EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos);
    std::string shape = "(";
    for (auto d : entry.shape) {
      shape += std::to_string(d) + ", ";
    }
    if (entry.shape.size() > 1) {
      shape.erase(shape.size() - 2);
    }
    EXPECT_NE(header.find("'shape': " + shape + ")"), std::string::npos) << header;
    ASSERT_EQ(bytes.size(), 10 + header_len + entry.size * 4);
    EXPECT_EQ(std::memcmp(bytes.data() + 10 + header_len, model.params().data() + entry.offset,
                          entry.size * 4),
              0);
  }
}

}  // namespace
}  // namespace fedcore::model
