// Fashion-MNIST (Xiao, Rasul and Vollgraf, 2017): 70,000 28x28 grey images of clothing in
// 10 classes, stored as four IDX files (see data/idx.hpp).
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "shared/data/dataset.hpp"
#include "shared/util/error.hpp"

namespace fedcore::data {

// Class names in label order: "T-shirt/top", "Trouser", ..., "Ankle boot".
const std::array<std::string_view, 10>& fashion_mnist_class_names() noexcept;

// The environment variable FEDCORE_FASHION_MNIST_DIR when set and non-empty, else
// "/usr/share/datasets/fashion-mnist" (where Debian's dataset-fashion-mnist package puts it).
std::string default_fashion_mnist_dir();

// Loads train-{images-idx3,labels-idx1}-ubyte and t10k-{images-idx3,labels-idx1}-ubyte from
// `dir`, each either gzip-compressed with a ".gz" suffix (preferred when both exist) or
// uncompressed without one. Result: HWC {28, 28, 1} (whatever the files declare), pixels in
// [0, 1], num_classes 10, class_names set.
// Errors: not_found when `dir` or one of the four files (under either name) is missing; the
// errors of load_idx; data_loss when a label is above 9 or train and test image shapes differ.
result<TrainTest> load_fashion_mnist(const std::string& dir = default_fashion_mnist_dir());

}  // namespace fedcore::data
