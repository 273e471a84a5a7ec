// CIFAR-10 binary version (Krizhevsky, 2009): 32x32 colour images in 10 classes.
//
// Each file is a sequence of 3073-byte records: one label byte (0..9), then 3072 pixel
// bytes stored channel-major (1024 red, 1024 green, 1024 blue, each 32x32 row-major).
// The loader converts every record to an HWC column {32, 32, 3} of floats in [0, 1].
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "shared/data/dataset.hpp"
#include "shared/util/error.hpp"

namespace fedcore::data {

inline constexpr std::size_t kCifar10RecordBytes = 3073;
// Limit on the records of one load_cifar10_batches call (12 GiB as floats).
inline constexpr std::size_t kCifar10MaxRecords = 1'000'000;

// "airplane", "automobile", ..., "truck", in label order.
const std::array<std::string_view, 10>& cifar10_class_names() noexcept;

// Reads the records of every file in `files`, in order, into one Dataset with
// sample_shape {32, 32, 3}, num_classes 10 and class_names set. Errors, naming the file:
//   not_found           a file does not exist;
//   io_error            a file cannot be opened or read;
//   data_loss           a file's size is not a multiple of 3073 ("truncated or not CIFAR-10
//                       binary"), a file is empty, or a record's label is above 9;
//   resource_exhausted  the files hold more than kCifar10MaxRecords records together.
result<Dataset> load_cifar10_batches(const std::vector<std::string>& files);

// Loads data_batch_1.bin .. data_batch_5.bin as train and test_batch.bin as test from
// `dir`, or from `dir`/cifar-10-batches-bin when `dir` is where the archive was unpacked.
// Errors: not_found when `dir` does not exist; otherwise those of load_cifar10_batches.
result<TrainTest> load_cifar10(const std::string& dir);

}  // namespace fedcore::data
