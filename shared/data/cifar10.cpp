#include "shared/data/cifar10.hpp"

#include <filesystem>
#include <fstream>

namespace fedcore::data {
namespace {

constexpr std::array<std::string_view, 10> kClassNames = {
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
};
constexpr std::size_t kSide = 32;
constexpr std::size_t kChannels = 3;
constexpr std::size_t kPlane = kSide * kSide;
constexpr std::size_t kPixelBytes = kPlane * kChannels;

std::string file_prefix(const std::string& path) {
  return "file '" + path + "': ";
}

// The number of records in `path`, from its size, before anything is read or allocated.
result<std::size_t> count_records(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    return fail(errc::not_found, file_prefix(path) + "does not exist");
  }
  if (ec || !std::filesystem::is_regular_file(status)) {
    return fail(errc::io_error, file_prefix(path) + "is not a readable regular file");
  }
  const auto bytes = std::filesystem::file_size(path, ec);
  if (ec) {
    return fail(errc::io_error, file_prefix(path) + "cannot read its size: " + ec.message());
  }
  if (bytes == 0) {
    return fail(errc::data_loss, file_prefix(path) + "is empty, not CIFAR-10 binary");
  }
  if (bytes % kCifar10RecordBytes != 0) {
    return fail(errc::data_loss,
                file_prefix(path) + "truncated or not CIFAR-10 binary: " + std::to_string(bytes) +
                    " bytes is not a multiple of " + std::to_string(kCifar10RecordBytes));
  }
  return static_cast<std::size_t>(bytes / kCifar10RecordBytes);
}

// Reads `records` records of `path` into columns first_column.. of `out`.
result<void> read_records(const std::string& path, std::size_t records, std::size_t first_column,
                          Dataset& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(errc::io_error, file_prefix(path) + "cannot be opened");
  }
  std::array<unsigned char, kCifar10RecordBytes> record;
  for (std::size_t r = 0; r < records; ++r) {
    if (!in.read(reinterpret_cast<char*>(record.data()), record.size())) {
      // The size was checked, so a short read means the file changed or the disk failed.
      return fail(errc::io_error, file_prefix(path) + "read failed at record " + std::to_string(r) +
                                      " of " + std::to_string(records));
    }
    if (record[0] > 9) {
      return fail(errc::data_loss, file_prefix(path) + "record " + std::to_string(r) +
                                       " has label " + std::to_string(record[0]) +
                                       ", expected 0..9");
    }
    const auto column = static_cast<Eigen::Index>(first_column + r);
    out.labels[first_column + r] = record[0];
    float* dst = out.features.col(column).data();
    const unsigned char* planes = record.data() + 1;
    // CHW on disk to HWC in memory: the three planes interleave pixel by pixel.
    for (std::size_t p = 0; p < kPlane; ++p) {
      for (std::size_t c = 0; c < kChannels; ++c) {
        dst[p * kChannels + c] = static_cast<float>(planes[c * kPlane + p]) * (1.0f / 255.0f);
      }
    }
  }
  return {};
}

}  // namespace

const std::array<std::string_view, 10>& cifar10_class_names() noexcept {
  return kClassNames;
}

result<Dataset> load_cifar10_batches(const std::vector<std::string>& files) {
  std::vector<std::size_t> counts;
  std::size_t total = 0;
  for (const auto& path : files) {
    auto records = count_records(path);
    if (!records) {
      return records.error();
    }
    counts.push_back(*records);
    total += *records;
    if (total > kCifar10MaxRecords) {
      return fail(errc::resource_exhausted, file_prefix(path) + "brings the total to " +
                                                std::to_string(total) + " records; the limit is " +
                                                std::to_string(kCifar10MaxRecords));
    }
  }

  Dataset out;
  out.features.resize(static_cast<Eigen::Index>(kPixelBytes), static_cast<Eigen::Index>(total));
  out.labels.resize(total);
  std::size_t column = 0;
  for (std::size_t f = 0; f < files.size(); ++f) {
    auto read = read_records(files[f], counts[f], column, out);
    if (!read) {
      return read.error();
    }
    column += counts[f];
  }
  out.sample_shape = {kSide, kSide, kChannels};
  out.num_classes = 10;
  out.class_names.assign(kClassNames.begin(), kClassNames.end());
  return out;
}

result<TrainTest> load_cifar10(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return fail(errc::not_found, "CIFAR-10 directory '" + dir + "' does not exist");
  }
  std::filesystem::path base = dir;
  // The official tarball unpacks into this subdirectory; accept its parent too.
  if (!std::filesystem::exists(base / "data_batch_1.bin", ec) &&
      std::filesystem::exists(base / "cifar-10-batches-bin" / "data_batch_1.bin", ec)) {
    base /= "cifar-10-batches-bin";
  }
  std::vector<std::string> train_files;
  for (int i = 1; i <= 5; ++i) {
    train_files.push_back((base / ("data_batch_" + std::to_string(i) + ".bin")).string());
  }
  auto train = load_cifar10_batches(train_files);
  if (!train) {
    return train.error();
  }
  auto test = load_cifar10_batches({(base / "test_batch.bin").string()});
  if (!test) {
    return test.error();
  }
  return TrainTest{std::move(*train), std::move(*test)};
}

}  // namespace fedcore::data
