#include "shared/data/idx.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>

#include <zlib.h>

#include "shared/util/assert.hpp"

namespace fedcore::data {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;
constexpr std::uint32_t kLabelsMagic = 0x00000801;
constexpr std::size_t kImagesHeaderBytes = 16;
constexpr std::size_t kLabelsHeaderBytes = 8;
// Bulk data is read in slices so a header that overstates the count costs only as much
// memory as the file really holds, not what the header claims.
constexpr std::size_t kReadSlice = std::size_t{16} << 20;

std::string file_prefix(const std::string& path) {
  return "file '" + path + "': ";
}

std::string hex32(std::uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

std::uint32_t big_endian_u32(const std::uint8_t* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
         (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
}

struct GzCloser {
  void operator()(gzFile_s* file) const noexcept { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

result<GzFile> open_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    return fail(errc::not_found, file_prefix(path) + "does not exist");
  }
  if (ec) {
    return fail(errc::io_error, file_prefix(path) + "cannot be examined: " + ec.message());
  }
  if (std::filesystem::is_directory(status)) {
    return fail(errc::invalid_argument, file_prefix(path) + "is a directory, expected a file");
  }
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int code = errno;
    return fail(errc::io_error, file_prefix(path) + "cannot be opened: " +
                                    (code != 0 ? std::strerror(code) : "out of memory"));
  }
  return GzFile(file);
}

// Reads until `out` is full or the stream ends; returns the number of bytes read. A short
// count means the (decompressed) file ended early, which callers report as truncation.
result<std::size_t> read_up_to(gzFile file, const std::string& path, std::span<std::uint8_t> out) {
  std::size_t total = 0;
  while (total < out.size()) {
    // gzread takes an unsigned length and returns an int, so ask for at most 1 GiB at once.
    const auto want = static_cast<unsigned>(std::min<std::size_t>(out.size() - total, 1u << 30));
    const int got = gzread(file, out.data() + total, want);
    if (got > 0) {
      total += static_cast<std::size_t>(got);
      continue;
    }
    int zerr = Z_OK;
    const char* message = gzerror(file, &zerr);
    // Z_BUF_ERROR is zlib's "unexpected end of file" for a cut-off gzip stream: that is
    // truncation, reported by the caller with the byte counts.
    if (got < 0 && zerr != Z_OK && zerr != Z_BUF_ERROR) {
      if (zerr == Z_ERRNO) {
        return fail(errc::io_error, file_prefix(path) + "read failed: " + std::strerror(errno));
      }
      return fail(errc::data_loss, file_prefix(path) + "corrupt gzip stream: " + message);
    }
    break;
  }
  return total;
}

// Reads exactly `count` bytes of bulk data in slices; `what` names what was expected
// when the file is short.
result<std::vector<std::uint8_t>> read_bulk(gzFile file, const std::string& path, std::size_t count,
                                            std::size_t header_bytes, const std::string& what) {
  std::vector<std::uint8_t> bytes;
  bytes.reserve(std::min(count, kReadSlice));
  while (bytes.size() < count) {
    const std::size_t old_size = bytes.size();
    const std::size_t slice = std::min(count - old_size, kReadSlice);
    bytes.resize(old_size + slice);
    auto got = read_up_to(file, path, std::span(bytes.data() + old_size, slice));
    if (!got) {
      return got.error();
    }
    if (*got < slice) {
      const std::size_t read = old_size + *got;
      return fail(errc::out_of_range, file_prefix(path) + "truncated: expected " +
                                          std::to_string(count) + " bytes of " + what +
                                          " after the " + std::to_string(header_bytes) +
                                          "-byte header, read " + std::to_string(read));
    }
  }
  return bytes;
}

// Reads the header and checks the magic number first, so a file of the wrong kind is
// reported as such even when it is also shorter than a header.
result<std::vector<std::uint8_t>> read_header(gzFile file, const std::string& path,
                                              std::size_t header_bytes, std::uint32_t magic) {
  std::vector<std::uint8_t> header(header_bytes);
  auto got = read_up_to(file, path, header);
  if (!got) {
    return got.error();
  }
  if (*got >= 4 && big_endian_u32(header.data()) != magic) {
    return fail(errc::data_loss, file_prefix(path) + "wrong magic number " +
                                     hex32(big_endian_u32(header.data())) + ", expected " +
                                     hex32(magic));
  }
  if (*got < header_bytes) {
    return fail(errc::out_of_range, file_prefix(path) + "truncated: expected a " +
                                        std::to_string(header_bytes) + "-byte header, read " +
                                        std::to_string(*got) + " bytes");
  }
  return header;
}

}  // namespace

result<IdxImages> read_idx_images(const std::string& path) {
  auto file = open_file(path);
  if (!file) {
    return file.error();
  }
  auto header = read_header(file->get(), path, kImagesHeaderBytes, kImagesMagic);
  if (!header) {
    return header.error();
  }
  const std::uint32_t count = big_endian_u32(header->data() + 4);
  const std::uint32_t rows = big_endian_u32(header->data() + 8);
  const std::uint32_t cols = big_endian_u32(header->data() + 12);
  const std::string shape =
      std::to_string(count) + " images of " + std::to_string(rows) + "x" + std::to_string(cols);
  if (count > kIdxMaxCount || rows > kIdxMaxSide || cols > kIdxMaxSide) {
    return fail(errc::resource_exhausted, file_prefix(path) + "header declares " + shape +
                                              "; the limits are " + std::to_string(kIdxMaxCount) +
                                              " images of at most " + std::to_string(kIdxMaxSide) +
                                              "x" + std::to_string(kIdxMaxSide));
  }
  // Each factor is bounded above, so this product cannot overflow 64 bits.
  const std::uint64_t pixels = std::uint64_t{count} * rows * cols;
  if (pixels > kIdxMaxPixels) {
    return fail(errc::resource_exhausted, file_prefix(path) + "header declares " + shape + " (" +
                                              std::to_string(pixels) + " pixels); the limit is " +
                                              std::to_string(kIdxMaxPixels) + " pixels");
  }
  if (rows == 0 || cols == 0) {
    return fail(errc::data_loss, file_prefix(path) + "header declares " + shape +
                                     ": images must have at least one row and column");
  }
  auto bytes = read_bulk(file->get(), path, static_cast<std::size_t>(pixels), kImagesHeaderBytes,
                         "pixels for " + shape);
  if (!bytes) {
    return bytes.error();
  }
  IdxImages images;
  images.count = count;
  images.rows = rows;
  images.cols = cols;
  images.pixels = std::move(*bytes);
  return images;
}

result<std::vector<std::uint8_t>> read_idx_labels(const std::string& path) {
  auto file = open_file(path);
  if (!file) {
    return file.error();
  }
  auto header = read_header(file->get(), path, kLabelsHeaderBytes, kLabelsMagic);
  if (!header) {
    return header.error();
  }
  const std::uint32_t count = big_endian_u32(header->data() + 4);
  if (count > kIdxMaxCount) {
    return fail(errc::resource_exhausted, file_prefix(path) + "header declares " +
                                              std::to_string(count) + " labels; the limit is " +
                                              std::to_string(kIdxMaxCount));
  }
  // Labels are one byte each, so "bytes" and "labels" are the same number here.
  return read_bulk(file->get(), path, count, kLabelsHeaderBytes, "labels (one byte each)");
}

result<Dataset> load_idx(const std::string& images_path, const std::string& labels_path,
                         std::int32_t num_classes) {
  FEDCORE_ASSERT(num_classes >= 0, "load_idx: num_classes must not be negative");
  auto images = read_idx_images(images_path);
  if (!images) {
    return images.error();
  }
  auto labels = read_idx_labels(labels_path);
  if (!labels) {
    return labels.error();
  }
  if (labels->size() != images->count) {
    return fail(errc::invalid_argument, "image file '" + images_path + "' holds " +
                                            std::to_string(images->count) +
                                            " images but label file '" + labels_path + "' holds " +
                                            std::to_string(labels->size()) + " labels");
  }

  Dataset out;
  const auto sample_size = static_cast<Eigen::Index>(images->rows * images->cols);
  const auto count = static_cast<Eigen::Index>(images->count);
  // IDX stores each image row-major, which is exactly an HWC column with C = 1.
  out.features = Eigen::Map<const Eigen::Matrix<std::uint8_t, Eigen::Dynamic, Eigen::Dynamic>>(
                     images->pixels.data(), sample_size, count)
                     .cast<float>() *
                 (1.0f / 255.0f);
  out.labels.assign(labels->begin(), labels->end());
  const std::uint8_t max_label =
      labels->empty() ? 0 : *std::max_element(labels->begin(), labels->end());
  out.num_classes = labels->empty() ? num_classes : std::max(num_classes, max_label + 1);
  out.sample_shape = {static_cast<std::int64_t>(images->rows),
                      static_cast<std::int64_t>(images->cols), 1};
  return out;
}

}  // namespace fedcore::data
