#include "shared/data/fashion_mnist.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/temp_dir.hpp"

namespace fedcore::data {
namespace {

using ::testing::HasSubstr;

TEST(FashionMnistTest, LoadsInstalledDataset) {
  const std::string dir = default_fashion_mnist_dir();
  if (!std::filesystem::is_directory(dir)) {
    GTEST_SKIP() << "Fashion-MNIST not found at '" << dir
                 << "' (install dataset-fashion-mnist or set FEDCORE_FASHION_MNIST_DIR)";
  }
  auto loaded = load_fashion_mnist();
  ASSERT_TRUE(loaded.has_value()) << loaded.error().to_string();
  const auto& [train, test] = *loaded;
  EXPECT_EQ(train.size(), 60000u);
  EXPECT_EQ(test.size(), 10000u);
  for (const Dataset* part : {&train, &test}) {
    EXPECT_EQ(part->sample_shape, (std::vector<std::int64_t>{28, 28, 1}));
    EXPECT_EQ(part->sample_size(), 784u);
    EXPECT_EQ(static_cast<std::size_t>(part->features.cols()), part->size());
    EXPECT_EQ(part->num_classes, 10);
    ASSERT_EQ(part->class_names.size(), 10u);
    EXPECT_EQ(part->class_names.front(), "T-shirt/top");
    EXPECT_EQ(part->class_names.back(), "Ankle boot");
    EXPECT_EQ(*std::min_element(part->labels.begin(), part->labels.end()), 0);
    EXPECT_EQ(*std::max_element(part->labels.begin(), part->labels.end()), 9);
    EXPECT_GE(part->features.minCoeff(), 0.0f);
    EXPECT_LE(part->features.maxCoeff(), 1.0f);
    EXPECT_EQ(part->features.maxCoeff(), 1.0f);  // some pixel is 255
  }
  // Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
  EXPECT_EQ(train.label_counts(), std::vector<std::size_t>(10, 6000));
  EXPECT_EQ(test.label_counts(), std::vector<std::size_t>(10, 1000));
}

// Sets an environment variable for one scope and restores the previous value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
    }
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(FashionMnistTest, DefaultDirectoryHonoursEnvironment) {
  {
    ScopedEnv env("FEDCORE_FASHION_MNIST_DIR", "/somewhere/else");
    EXPECT_EQ(default_fashion_mnist_dir(), "/somewhere/else");
  }
  {
    ScopedEnv env("FEDCORE_FASHION_MNIST_DIR", "");
    EXPECT_EQ(default_fashion_mnist_dir(), "/usr/share/datasets/fashion-mnist");
  }
}

TEST(FashionMnistTest, ClassNames) {
  EXPECT_EQ(fashion_mnist_class_names()[0], "T-shirt/top");
  EXPECT_EQ(fashion_mnist_class_names()[5], "Sandal");
  EXPECT_EQ(fashion_mnist_class_names()[9], "Ankle boot");
}

void put_u32(std::vector<char>& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>(value >> shift));
  }
}

void write_file(const std::filesystem::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// Writes uncompressed 2x2 IDX files under Fashion-MNIST's names (without ".gz").
void write_small_dataset(const std::filesystem::path& dir, std::uint8_t last_label) {
  for (const std::string prefix : {"train", "t10k"}) {
    std::vector<char> images;
    put_u32(images, 0x00000803);
    put_u32(images, 2);
    put_u32(images, 2);
    put_u32(images, 2);
    images.insert(images.end(), {0, 1, 2, 3, 4, 5, 6, static_cast<char>(255)});
    write_file(dir / (prefix + "-images-idx3-ubyte"), images);
    std::vector<char> labels;
    put_u32(labels, 0x00000801);
    put_u32(labels, 2);
    labels.insert(labels.end(), {0, static_cast<char>(last_label)});
    write_file(dir / (prefix + "-labels-idx1-ubyte"), labels);
  }
}

class FashionMnistDirTest : public ::testing::Test {
 protected:
  fedcore::testing::TempDir temp_;
  std::filesystem::path dir_ = temp_.root();
};

TEST_F(FashionMnistDirTest, LoadsUncompressedFiles) {
  write_small_dataset(dir_, 9);
  auto loaded = load_fashion_mnist(dir_.string());
  ASSERT_TRUE(loaded.has_value()) << loaded.error().to_string();
  EXPECT_EQ(loaded->train.size(), 2u);
  EXPECT_EQ(loaded->test.size(), 2u);
  EXPECT_EQ(loaded->test.sample_shape, (std::vector<std::int64_t>{2, 2, 1}));
  EXPECT_EQ(loaded->train.labels, (std::vector<std::int32_t>{0, 9}));
  EXPECT_EQ(loaded->train.class_names.size(), 10u);
  EXPECT_FLOAT_EQ(loaded->train.features(3, 1), 1.0f);
}

TEST_F(FashionMnistDirTest, MissingDirectoryIsNotFound) {
  auto loaded = load_fashion_mnist((dir_ / "absent").string());
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::not_found);
  EXPECT_THAT(loaded.error().message, HasSubstr((dir_ / "absent").string()));
}

TEST_F(FashionMnistDirTest, MissingFileNamesBothCandidates) {
  write_small_dataset(dir_, 9);
  std::filesystem::remove(dir_ / "t10k-labels-idx1-ubyte");
  auto loaded = load_fashion_mnist(dir_.string());
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::not_found);
  EXPECT_THAT(loaded.error().message, HasSubstr("t10k-labels-idx1-ubyte.gz"));
  EXPECT_THAT(loaded.error().message, HasSubstr("t10k-labels-idx1-ubyte' exists"));
}

TEST_F(FashionMnistDirTest, LabelAboveNineIsDataLoss) {
  write_small_dataset(dir_, 10);
  auto loaded = load_fashion_mnist(dir_.string());
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, errc::data_loss);
  EXPECT_THAT(loaded.error().message, HasSubstr("train-labels-idx1-ubyte"));
}

}  // namespace
}  // namespace fedcore::data
