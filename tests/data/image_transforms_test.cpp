#include "shared/data/image_transforms.hpp"

#include <gtest/gtest.h>

namespace fedcore::data {
namespace {

// A 2x3 single-channel image per column: pixel (y, x) = 10 y + x + 1 + 100 n.
Dataset small_images(int count) {
  Dataset d;
  d.sample_shape = {2, 3, 1};
  d.num_classes = 2;
  d.features.resize(6, count);
  for (int n = 0; n < count; ++n) {
    for (int y = 0; y < 2; ++y) {
      for (int x = 0; x < 3; ++x) {
        d.features(y * 3 + x, n) = float(10 * y + x + 1 + 100 * n);
      }
    }
    d.labels.push_back(n % 2);
  }
  return d;
}

TEST(PadImages, CentresAndReplicatesChannels) {
  auto padded = pad_images(small_images(2), 4, 5, 3);
  ASSERT_TRUE(padded) << padded.error().message;
  EXPECT_EQ(padded->sample_shape, (std::vector<std::int64_t>{4, 5, 3}));
  EXPECT_EQ(padded->labels, (std::vector<std::int32_t>{0, 1}));
  // top = 1, left = 1: pixel (0, 0) lands at (1, 1) in all three channels.
  const auto at = [&](int n, int y, int x, int c) {
    return padded->features((y * 5 + x) * 3 + c, n);
  };
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(at(0, 1, 1, c), 1.0f);
    EXPECT_EQ(at(1, 2, 3, c), 113.0f);  // (1, 2) of image 1
    EXPECT_EQ(at(0, 0, 0, c), 0.0f);
    EXPECT_EQ(at(0, 3, 4, c), 0.0f);
  }
  EXPECT_EQ(padded->features.col(0).sum(), 3.0f * (1 + 2 + 3 + 11 + 12 + 13));
}

TEST(PadImages, RefusesWhatItCannotDo) {
  EXPECT_FALSE(pad_images(small_images(1), 1, 5, 1));  // smaller than the images
  Dataset table;
  table.sample_shape = {6};
  table.features.resize(6, 1);
  table.labels = {0};
  auto flat = pad_images(table, 4, 4, 1);
  ASSERT_FALSE(flat);
  EXPECT_NE(flat.error().message.find("not images"), std::string::npos);
}

TEST(AugmentImages, NothingEnabledChangesNothing) {
  auto d = small_images(3);
  const Eigen::MatrixXf before = d.features;
  Rng rng(1);
  augment_images(d.features, d.sample_shape, {}, rng);
  EXPECT_EQ(d.features, before);
}

TEST(AugmentImages, FlipMirrorsRowsAndShiftsFillWithZeros) {
  auto d = small_images(64);
  Rng rng(2);
  augment_images(d.features, d.sample_shape, {1, true}, rng);
  // Replay the draws to know what each image got, and check it pixel by pixel.
  Rng replay(2);
  const auto original = small_images(64);
  int flipped = 0, shifted = 0;
  for (int n = 0; n < 64; ++n) {
    const auto dy = static_cast<int>(replay.below(3)) - 1;
    const auto dx = static_cast<int>(replay.below(3)) - 1;
    const bool flip = replay.below(2) == 1;
    flipped += flip;
    shifted += dy != 0 || dx != 0;
    for (int y = 0; y < 2; ++y) {
      for (int x = 0; x < 3; ++x) {
        const int sy = y + dy, sx = (flip ? 2 - x : x) + dx;
        const float expected =
            sy < 0 || sy >= 2 || sx < 0 || sx >= 3 ? 0.0f : original.features(sy * 3 + sx, n);
        EXPECT_EQ(d.features(y * 3 + x, n), expected) << "image " << n;
      }
    }
  }
  // Both parts happened to a fair share of 64 images.
  EXPECT_GT(flipped, 16);
  EXPECT_LT(flipped, 48);
  EXPECT_GT(shifted, 32);
}

TEST(AugmentImages, SameSeedSameBatch) {
  auto a = small_images(8), b = small_images(8);
  Rng ra(5), rb(5);
  augment_images(a.features, a.sample_shape, {2, true}, ra);
  augment_images(b.features, b.sample_shape, {2, true}, rb);
  EXPECT_EQ(a.features, b.features);
}

}  // namespace
}  // namespace fedcore::data
