#include "shared/data/idx.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include "tests/temp_dir.hpp"

namespace fedcore::data {
namespace {

using ::testing::HasSubstr;

void put_u32(std::vector<std::uint8_t>& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out.push_back(static_cast<std::uint8_t>(value >> shift));
  }
}

std::uint8_t pixel_value(std::size_t image, std::size_t offset) {
  return static_cast<std::uint8_t>((image * 37 + offset * 11) % 256);
}

std::vector<std::uint8_t> images_bytes(std::uint32_t count, std::uint32_t rows,
                                       std::uint32_t cols) {
  std::vector<std::uint8_t> out;
  put_u32(out, 0x00000803);
  put_u32(out, count);
  put_u32(out, rows);
  put_u32(out, cols);
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t p = 0; p < std::size_t{rows} * cols; ++p) {
      out.push_back(pixel_value(i, p));
    }
  }
  return out;
}

std::vector<std::uint8_t> labels_bytes(const std::vector<std::uint8_t>& labels) {
  std::vector<std::uint8_t> out;
  put_u32(out, 0x00000801);
  put_u32(out, static_cast<std::uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

void write_raw(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void write_gz(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

class IdxTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes a well-formed 3-image 2x3 pair and returns {images, labels} paths.
  std::pair<std::string, std::string> write_pair(bool gzip) {
    const std::string images = path(gzip ? "images.gz" : "images");
    const std::string labels = path(gzip ? "labels.gz" : "labels");
    auto writer = gzip ? write_gz : write_raw;
    writer(images, images_bytes(3, 2, 3));
    writer(labels, labels_bytes({0, 9, 4}));
    return {images, labels};
  }

  fedcore::testing::TempDir temp_;
  std::filesystem::path dir_ = temp_.root();
};

void expect_round_trip(const result<Dataset>& loaded) {
  ASSERT_TRUE(loaded.has_value()) << loaded.error().to_string();
  const Dataset& data = *loaded;
  EXPECT_EQ(data.size(), 3u);
  EXPECT_EQ(data.sample_size(), 6u);
  EXPECT_EQ(data.sample_shape, (std::vector<std::int64_t>{2, 3, 1}));
  EXPECT_EQ(data.labels, (std::vector<std::int32_t>{0, 9, 4}));
  EXPECT_EQ(data.num_classes, 10);
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t p = 0; p < 6; ++p) {
      EXPECT_FLOAT_EQ(data.features(static_cast<Eigen::Index>(p), static_cast<Eigen::Index>(i)),
                      pixel_value(i, p) / 255.0f);
    }
  }
  EXPECT_GE(data.features.minCoeff(), 0.0f);
  EXPECT_LE(data.features.maxCoeff(), 1.0f);
}

TEST_F(IdxTest, RoundTripRaw) {
  const auto [images, labels] = write_pair(false);
  expect_round_trip(load_idx(images, labels));
}

TEST_F(IdxTest, RoundTripGzip) {
  const auto [images, labels] = write_pair(true);
  expect_round_trip(load_idx(images, labels));
}

TEST_F(IdxTest, NumClassesGrowsToFitLabels) {
  write_raw(path("images"), images_bytes(2, 1, 1));
  write_raw(path("labels"), labels_bytes({3, 12}));
  auto loaded = load_idx(path("images"), path("labels"));
  ASSERT_TRUE(loaded.has_value()) << loaded.error().to_string();
  EXPECT_EQ(loaded->num_classes, 13);
  auto wider = load_idx(path("images"), path("labels"), 20);
  ASSERT_TRUE(wider.has_value());
  EXPECT_EQ(wider->num_classes, 20);
}

TEST_F(IdxTest, MissingImagesFileIsNotFound) {
  const auto [images, labels] = write_pair(false);
  auto loaded = load_idx(path("nope-images"), labels);
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::not_found);
  EXPECT_THAT(loaded.error().message, HasSubstr("nope-images"));
}

TEST_F(IdxTest, MissingLabelsFileIsNotFound) {
  const auto [images, labels] = write_pair(false);
  auto loaded = load_idx(images, path("nope-labels"));
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::not_found);
  EXPECT_THAT(loaded.error().message, HasSubstr("nope-labels"));
}

TEST_F(IdxTest, DirectoryIsInvalidArgument) {
  auto loaded = read_idx_images(dir_.string());
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::invalid_argument);
  EXPECT_THAT(loaded.error().message, HasSubstr(dir_.string()));
}

TEST_F(IdxTest, WrongMagicInImagesIsDataLoss) {
  const auto [images, labels] = write_pair(false);
  // Swapped arguments: the labels file where the images file belongs.
  auto loaded = load_idx(labels, images);
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::data_loss);
  EXPECT_THAT(loaded.error().message, HasSubstr(labels));
  EXPECT_THAT(loaded.error().message, HasSubstr("0x00000801"));
  EXPECT_THAT(loaded.error().message, HasSubstr("expected 0x00000803"));
}

TEST_F(IdxTest, WrongMagicInLabelsIsDataLoss) {
  const auto [images, labels] = write_pair(true);
  auto loaded = load_idx(images, images);
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::data_loss);
  EXPECT_THAT(loaded.error().message, HasSubstr(images));
  EXPECT_THAT(loaded.error().message, HasSubstr("0x00000803, expected 0x00000801"));
}

TEST_F(IdxTest, TruncatedImagesIsOutOfRange) {
  auto bytes = images_bytes(3, 2, 3);
  bytes.resize(bytes.size() - 10);  // 18 pixel bytes declared, 8 present
  write_raw(path("images"), bytes);
  write_raw(path("labels"), labels_bytes({0, 1, 2}));
  auto loaded = load_idx(path("images"), path("labels"));
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::out_of_range);
  EXPECT_THAT(loaded.error().message, HasSubstr(path("images")));
  EXPECT_THAT(loaded.error().message, HasSubstr("expected 18 bytes"));
  EXPECT_THAT(loaded.error().message, HasSubstr("read 8"));
}

TEST_F(IdxTest, TruncatedImagesHeaderIsOutOfRange) {
  auto bytes = images_bytes(3, 2, 3);
  bytes.resize(10);
  write_gz(path("images.gz"), bytes);
  auto loaded = read_idx_images(path("images.gz"));
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::out_of_range);
  EXPECT_THAT(loaded.error().message, HasSubstr(path("images.gz")));
  EXPECT_THAT(loaded.error().message, HasSubstr("16-byte header, read 10"));
}

TEST_F(IdxTest, CutGzipStreamIsOutOfRange) {
  // Enough incompressible-looking data that cutting the compressed file loses pixels.
  write_gz(path("images.gz"), images_bytes(200, 28, 28));
  const auto full = std::filesystem::file_size(path("images.gz"));
  std::filesystem::resize_file(path("images.gz"), full / 2);
  auto loaded = read_idx_images(path("images.gz"));
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::out_of_range) << loaded.error().message;
  EXPECT_THAT(loaded.error().message, HasSubstr(path("images.gz")));
}

TEST_F(IdxTest, CorruptGzipStreamIsDataLoss) {
  write_gz(path("images.gz"), images_bytes(20, 28, 28));
  // Overwrite compressed bytes after the 10-byte gzip header with garbage.
  {
    std::fstream file(path("images.gz"), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(10);
    const std::string garbage(64, '\xff');
    file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  auto loaded = read_idx_images(path("images.gz"));
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::data_loss) << loaded.error().message;
  EXPECT_THAT(loaded.error().message, HasSubstr(path("images.gz")));
}

TEST_F(IdxTest, TruncatedLabelsIsOutOfRange) {
  write_raw(path("images"), images_bytes(3, 2, 3));
  auto bytes = labels_bytes({0, 1, 2});
  bytes.pop_back();
  write_raw(path("labels"), bytes);
  auto loaded = load_idx(path("images"), path("labels"));
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::out_of_range);
  EXPECT_THAT(loaded.error().message, HasSubstr(path("labels")));
  EXPECT_THAT(loaded.error().message, HasSubstr("expected 3 bytes"));
  EXPECT_THAT(loaded.error().message, HasSubstr("read 2"));
}

TEST_F(IdxTest, CountMismatchIsInvalidArgument) {
  write_raw(path("images"), images_bytes(3, 2, 3));
  write_raw(path("labels"), labels_bytes({0, 1}));
  auto loaded = load_idx(path("images"), path("labels"));
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::invalid_argument);
  EXPECT_THAT(loaded.error().message, HasSubstr(path("images")));
  EXPECT_THAT(loaded.error().message, HasSubstr(path("labels")));
  EXPECT_THAT(loaded.error().message, HasSubstr("3 images"));
  EXPECT_THAT(loaded.error().message, HasSubstr("2 labels"));
}

TEST_F(IdxTest, AbsurdHeadersAreResourceExhaustedBeforeAllocating) {
  struct Case {
    std::uint32_t count, rows, cols;
  };
  // Each header claims terabytes but the file holds none of it; reading must fail on the
  // header alone rather than allocate.
  for (const Case c : {Case{0xFFFFFFFFu, 28, 28}, Case{10, 100000, 28}, Case{10, 28, 5000},
                       Case{10'000'000, 4096, 4096}}) {
    std::vector<std::uint8_t> bytes;
    put_u32(bytes, 0x00000803);
    put_u32(bytes, c.count);
    put_u32(bytes, c.rows);
    put_u32(bytes, c.cols);
    write_raw(path("absurd"), bytes);
    auto loaded = read_idx_images(path("absurd"));
    ASSERT_FALSE(loaded.has_value());
    EXPECT_EQ(loaded.error().code, errc::resource_exhausted) << loaded.error().message;
    EXPECT_THAT(loaded.error().message, HasSubstr(path("absurd")));
  }
  std::vector<std::uint8_t> labels;
  put_u32(labels, 0x00000801);
  put_u32(labels, 0xFFFFFFFFu);
  write_raw(path("absurd-labels"), labels);
  auto loaded = read_idx_labels(path("absurd-labels"));
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::resource_exhausted);
  EXPECT_THAT(loaded.error().message, HasSubstr(path("absurd-labels")));
}

TEST_F(IdxTest, ZeroSizedImagesAreDataLoss) {
  write_raw(path("images"), images_bytes(3, 0, 3));
  auto loaded = read_idx_images(path("images"));
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::data_loss);
  EXPECT_THAT(loaded.error().message, HasSubstr(path("images")));
}

}  // namespace
}  // namespace fedcore::data
