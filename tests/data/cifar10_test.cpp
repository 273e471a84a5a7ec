#include "shared/data/cifar10.hpp"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/temp_dir.hpp"

namespace fedcore::data {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t kPlane = 1024;

// The byte stored for record `record`, channel `c`, pixel (y, x).
std::uint8_t value(std::size_t record, std::size_t c, std::size_t y, std::size_t x) {
  return static_cast<std::uint8_t>((record * 31 + c * 101 + y * 7 + x) % 256);
}

// CIFAR-10 records as the format stores them: label, then the R, G and B planes.
std::vector<char> records(std::size_t first, std::size_t count) {
  std::vector<char> out;
  for (std::size_t r = first; r < first + count; ++r) {
    out.push_back(static_cast<char>(r % 10));
    for (std::size_t c = 0; c < 3; ++c) {
      for (std::size_t p = 0; p < kPlane; ++p) {
        out.push_back(static_cast<char>(value(r, c, p / 32, p % 32)));
      }
    }
  }
  return out;
}

class Cifar10Test : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::vector<char>& bytes) {
    const auto path = dir_ / name;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good()) << path;
    return path.string();
  }
  fedcore::testing::TempDir temp_;
  std::filesystem::path dir_ = temp_.root();
};

TEST_F(Cifar10Test, RoundTripConvertsChwToHwc) {
  const std::string a = write("a.bin", records(0, 3));
  const std::string b = write("b.bin", records(3, 2));
  auto loaded = load_cifar10_batches({a, b});
  ASSERT_TRUE(loaded.has_value()) << loaded.error().to_string();
  const Dataset& data = *loaded;
  ASSERT_EQ(data.size(), 5u);
  EXPECT_EQ(data.sample_shape, (std::vector<std::int64_t>{32, 32, 3}));
  EXPECT_EQ(data.sample_size(), 3072u);
  EXPECT_EQ(data.labels, (std::vector<std::int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(data.num_classes, 10);
  ASSERT_EQ(data.class_names.size(), 10u);
  EXPECT_EQ(data.class_names[0], "airplane");
  EXPECT_EQ(data.class_names[9], "truck");
  // Blue channel of pixel (y=5, x=7) of the fourth record (first of the second file).
  const std::size_t y = 5, x = 7, c = 2, r = 3;
  EXPECT_FLOAT_EQ(
      data.features(static_cast<Eigen::Index>((y * 32 + x) * 3 + c), static_cast<Eigen::Index>(r)),
      value(r, c, y, x) / 255.0f);
  for (std::size_t rr = 0; rr < 5; ++rr) {
    for (std::size_t cc = 0; cc < 3; ++cc) {
      for (std::size_t p = 0; p < kPlane; ++p) {
        ASSERT_FLOAT_EQ(
            data.features(static_cast<Eigen::Index>(p * 3 + cc), static_cast<Eigen::Index>(rr)),
            value(rr, cc, p / 32, p % 32) / 255.0f);
      }
    }
  }
}

TEST_F(Cifar10Test, TruncatedFileIsDataLoss) {
  auto bytes = records(0, 2);
  bytes.resize(bytes.size() - 5);
  const std::string path = write("cut.bin", bytes);
  auto loaded = load_cifar10_batches({path});
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::data_loss);
  EXPECT_THAT(loaded.error().message, HasSubstr(path));
  EXPECT_THAT(loaded.error().message,
              HasSubstr("truncated or not CIFAR-10 binary: 6141 bytes is not a multiple of 3073"));
}

TEST_F(Cifar10Test, EmptyFileIsDataLoss) {
  const std::string path = write("empty.bin", {});
  auto loaded = load_cifar10_batches({path});
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::data_loss);
  EXPECT_THAT(loaded.error().message, HasSubstr(path));
}

TEST_F(Cifar10Test, MissingFileIsNotFound) {
  const std::string good = write("good.bin", records(0, 1));
  const std::string missing = (dir_ / "missing.bin").string();
  auto loaded = load_cifar10_batches({good, missing});
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::not_found);
  EXPECT_THAT(loaded.error().message, HasSubstr(missing));
}

TEST_F(Cifar10Test, LabelAboveNineIsDataLoss) {
  auto bytes = records(0, 3);
  bytes[2 * 3073] = 10;
  const std::string path = write("bad-label.bin", bytes);
  auto loaded = load_cifar10_batches({path});
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::data_loss);
  EXPECT_THAT(loaded.error().message, HasSubstr(path));
  EXPECT_THAT(loaded.error().message, HasSubstr("record 2 has label 10"));
}

TEST_F(Cifar10Test, LoadsStandardLayoutFromArchiveParent) {
  for (int i = 1; i <= 5; ++i) {
    write("cifar-10-batches-bin/data_batch_" + std::to_string(i) + ".bin",
          records(static_cast<std::size_t>(i), 2));
  }
  write("cifar-10-batches-bin/test_batch.bin", records(0, 3));
  auto loaded = load_cifar10(dir_.string());
  ASSERT_TRUE(loaded.has_value()) << loaded.error().to_string();
  EXPECT_EQ(loaded->train.size(), 10u);
  EXPECT_EQ(loaded->test.size(), 3u);
  EXPECT_EQ(loaded->train.labels.front(), 1);

  auto direct = load_cifar10((dir_ / "cifar-10-batches-bin").string());
  ASSERT_TRUE(direct.has_value()) << direct.error().to_string();
  EXPECT_EQ(direct->train.labels, loaded->train.labels);
}

TEST_F(Cifar10Test, MissingBatchInDirectoryIsNotFound) {
  write("data_batch_1.bin", records(0, 1));
  auto loaded = load_cifar10(dir_.string());
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::not_found);
  EXPECT_THAT(loaded.error().message, HasSubstr("data_batch_2.bin"));
}

}  // namespace
}  // namespace fedcore::data
