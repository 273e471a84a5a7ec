#include "shared/data/image_transforms.hpp"

#include <algorithm>
#include <vector>

#include "shared/util/assert.hpp"

namespace fedcore::data {

result<Dataset> pad_images(const Dataset& images, std::int64_t height, std::int64_t width,
                           std::int64_t channels) {
  const auto& shape = images.sample_shape;
  if (shape.size() != 3) {
    return fail(errc::invalid_argument, "pad_images: the data are not images (sample shape of " +
                                            std::to_string(shape.size()) + " dimensions)");
  }
  const std::int64_t h = shape[0], w = shape[1], c = shape[2];
  if (h > height || w > width) {
    return fail(errc::invalid_argument, "pad_images: " + std::to_string(h) + "x" +
                                            std::to_string(w) + " images are larger than " +
                                            std::to_string(height) + "x" + std::to_string(width));
  }
  if (channels < 1 || (c != 1 && c != channels)) {
    return fail(errc::invalid_argument, "pad_images: cannot make " + std::to_string(channels) +
                                            " channels from " + std::to_string(c));
  }
  const std::int64_t top = (height - h) / 2, left = (width - w) / 2;
  Dataset out;
  out.labels = images.labels;
  out.num_classes = images.num_classes;
  out.class_names = images.class_names;
  out.sample_shape = {height, width, channels};
  out.features.setZero(height * width * channels, images.features.cols());
  for (Eigen::Index n = 0; n < images.features.cols(); ++n) {
    const float* src = images.features.col(n).data();
    float* dst = out.features.col(n).data();
    for (std::int64_t y = 0; y < h; ++y) {
      for (std::int64_t x = 0; x < w; ++x) {
        for (std::int64_t k = 0; k < channels; ++k) {
          dst[((y + top) * width + (x + left)) * channels + k] =
              src[(y * w + x) * c + (c == 1 ? 0 : k)];
        }
      }
    }
  }
  return out;
}

void augment_images(Eigen::MatrixXf& batch, const std::vector<std::int64_t>& shape,
                    const Augmentation& augmentation, Rng& rng) {
  FEDCORE_ASSERT(shape.size() == 3 && shape[0] * shape[1] * shape[2] == batch.rows(),
                 "augment_images: batch rows differ from the image shape");
  if (!augmentation.enabled()) {
    return;
  }
  const std::int64_t h = shape[0], w = shape[1], c = shape[2];
  const std::int64_t p = augmentation.crop_padding;
  std::vector<float> source(static_cast<std::size_t>(batch.rows()));
  for (Eigen::Index n = 0; n < batch.cols(); ++n) {
    // Three draws per image whatever is enabled, so turning one part off does not change
    // what the other part does to later images.
    const auto dy = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(2 * p + 1))) - p;
    const auto dx = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(2 * p + 1))) - p;
    const bool flip = augmentation.horizontal_flip && rng.below(2) == 1;
    if (dy == 0 && dx == 0 && !flip) {
      continue;
    }
    float* image = batch.col(n).data();
    std::copy(image, image + batch.rows(), source.begin());
    for (std::int64_t y = 0; y < h; ++y) {
      const std::int64_t sy = y + dy;
      for (std::int64_t x = 0; x < w; ++x) {
        // Output (y, x) shows the crop's pixel, mirrored when flipping.
        const std::int64_t sx = (flip ? w - 1 - x : x) + dx;
        float* out = image + (y * w + x) * c;
        if (sy < 0 || sy >= h || sx < 0 || sx >= w) {
          std::fill(out, out + c, 0.0f);
        } else {
          const float* in = source.data() + (sy * w + sx) * c;
          std::copy(in, in + c, out);
        }
      }
    }
  }
}

}  // namespace fedcore::data
