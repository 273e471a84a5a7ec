// IDX reader (the MNIST / Fashion-MNIST file format, LeCun et al.).
//
// An IDX file is a big-endian header followed by raw unsigned bytes:
//   images: magic 0x00000803, count, rows, cols, then count*rows*cols pixel bytes;
//   labels: magic 0x00000801, count, then count label bytes.
// Files are read through zlib, so gzip-compressed (.gz) and uncompressed files are both
// accepted without the caller saying which.
//
// Every error message names the file and the problem ("file '/x/t10k-images-idx3-ubyte.gz':
// wrong magic number 0x00000801, expected 0x00000803").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shared/data/dataset.hpp"
#include "shared/util/error.hpp"

namespace fedcore::data {

// Sanity limits on header fields, checked before anything is allocated.
inline constexpr std::uint32_t kIdxMaxCount = 10'000'000;
inline constexpr std::uint32_t kIdxMaxSide = 4096;
inline constexpr std::uint64_t kIdxMaxPixels = std::uint64_t{1} << 31;  // count*rows*cols

// The raw contents of an IDX image file.
struct IdxImages {
  std::size_t count = 0;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<std::uint8_t> pixels;  // count*rows*cols bytes, image after image, row-major
};

// Reads an IDX image file (gzip or raw). Errors, each naming the file:
//   not_found           the file does not exist;
//   invalid_argument    the path is a directory;
//   io_error            the file exists but cannot be opened;
//   data_loss           wrong magic number (found and expected shown in hex), zero rows or
//                       cols, or a corrupt gzip stream;
//   out_of_range        the file ends inside the header or the pixels (bytes expected vs read);
//   resource_exhausted  count > kIdxMaxCount, rows or cols > kIdxMaxSide, or
//                       count*rows*cols > kIdxMaxPixels.
result<IdxImages> read_idx_images(const std::string& path);

// Reads an IDX label file (gzip or raw). Errors as read_idx_images (with magic 0x00000801,
// and out_of_range saying how many labels were expected and read).
result<std::vector<std::uint8_t>> read_idx_labels(const std::string& path);

// Loads an image file and its label file into a Dataset: sample_shape {rows, cols, 1} (HWC),
// pixels scaled from 0..255 to [0, 1], num_classes = max(num_classes, max label + 1).
// REQUIRES: num_classes >= 0.
// Errors: those of read_idx_images and read_idx_labels, and invalid_argument when the two
// files hold different numbers of items (both files and both counts named).
result<Dataset> load_idx(const std::string& images_path, const std::string& labels_path,
                         std::int32_t num_classes = 10);

}  // namespace fedcore::data
