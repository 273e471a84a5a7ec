// TempDir: a fresh directory under the system temp folder, removed with its contents
// when the object goes out of scope.
#pragma once

#include <atomic>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace fedcore::testing {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("fedcore-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path(const std::string& name = "") const { return (path_ / name).string(); }
  const std::filesystem::path& root() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace fedcore::testing
