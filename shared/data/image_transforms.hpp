// Image transforms for small-image training: the 32x32 stand-in for CIFAR-10 built from
// Fashion-MNIST, and the random crop and flip of the training loop.
//
// Images are HWC columns (shared/data/dataset.hpp): sample_shape {H, W, C}.
#pragma once

#include <cstdint>

#include "shared/data/dataset.hpp"
#include "shared/util/error.hpp"
#include "shared/util/rng.hpp"

namespace fedcore::data {

// Every image zero-padded (centred; an odd remainder goes right and down) to
// height x width, and a single channel repeated `channels` times (1 or 3).
// Fashion-MNIST's 28x28 becomes CIFAR-10's 32x32 (x3): the stand-in this project ships, since
// CIFAR-10 cannot be downloaded on its machines. Errors: invalid_argument when the data are
// not images, are larger than the target, or have more than one channel and `channels`
// differs from theirs.
result<Dataset> pad_images(const Dataset& images, std::int64_t height, std::int64_t width,
                           std::int64_t channels);

// Random-crop-with-padding and horizontal flip, as torchvision's
// RandomCrop(size, padding=p) + RandomHorizontalFlip(): each image is shifted by an offset
// drawn uniformly in [-p, p] on each axis (what falls outside is zero, as if the image were
// padded by p and a window of its own size cut out), then mirrored left-right with
// probability 1/2. p = 0 and no flip: nothing changes.
struct Augmentation {
  std::int64_t crop_padding = 0;
  bool horizontal_flip = false;
  bool enabled() const noexcept { return crop_padding > 0 || horizontal_flip; }
};

// Augments every column of `batch` (images of `shape` {H, W, C}) in place, drawing three
// numbers per image from `rng`, in column order: the same rng state gives the same batch.
// REQUIRES: shape is {H, W, C} with H * W * C == batch.rows().
void augment_images(Eigen::MatrixXf& batch, const std::vector<std::int64_t>& shape,
                    const Augmentation& augmentation, Rng& rng);

}  // namespace fedcore::data
