#include "shared/data/fashion_mnist.hpp"

#include <cstdlib>
#include <filesystem>

#include "shared/data/idx.hpp"

namespace fedcore::data {
namespace {

constexpr std::array<std::string_view, 10> kClassNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot",
};

// The archive is distributed gzipped, but people often gunzip it in place.
result<std::string> find_file(const std::filesystem::path& dir, const std::string& stem) {
  const auto gz = dir / (stem + ".gz");
  const auto raw = dir / stem;
  std::error_code ec;
  if (std::filesystem::exists(gz, ec)) {
    return gz.string();
  }
  if (std::filesystem::exists(raw, ec)) {
    return raw.string();
  }
  return fail(errc::not_found,
              "Fashion-MNIST: neither '" + gz.string() + "' nor '" + raw.string() + "' exists");
}

result<Dataset> load_part(const std::filesystem::path& dir, const std::string& prefix) {
  auto images = find_file(dir, prefix + "-images-idx3-ubyte");
  if (!images) {
    return images.error();
  }
  auto labels = find_file(dir, prefix + "-labels-idx1-ubyte");
  if (!labels) {
    return labels.error();
  }
  auto part = load_idx(*images, *labels, 10);
  if (!part) {
    return part.error();
  }
  // load_idx widens num_classes to fit the labels; Fashion-MNIST has exactly ten.
  if (part->num_classes != 10) {
    return fail(errc::data_loss, "file '" + *labels + "': label " +
                                     std::to_string(part->num_classes - 1) +
                                     " is not a Fashion-MNIST class (0..9)");
  }
  part->class_names.assign(kClassNames.begin(), kClassNames.end());
  return part;
}

}  // namespace

const std::array<std::string_view, 10>& fashion_mnist_class_names() noexcept {
  return kClassNames;
}

std::string default_fashion_mnist_dir() {
  const char* from_env = std::getenv("FEDCORE_FASHION_MNIST_DIR");
  if (from_env != nullptr && *from_env != '\0') {
    return from_env;
  }
  return "/usr/share/datasets/fashion-mnist";
}

result<TrainTest> load_fashion_mnist(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return fail(errc::not_found, "Fashion-MNIST directory '" + dir +
                                     "' does not exist (install dataset-fashion-mnist or set "
                                     "FEDCORE_FASHION_MNIST_DIR)");
  }
  auto train = load_part(dir, "train");
  if (!train) {
    return train.error();
  }
  auto test = load_part(dir, "t10k");
  if (!test) {
    return test.error();
  }
  if (train->sample_shape != test->sample_shape) {
    return fail(errc::data_loss,
                "Fashion-MNIST in '" + dir + "': training and test images have different shapes");
  }
  return TrainTest{std::move(*train), std::move(*test)};
}

}  // namespace fedcore::data
