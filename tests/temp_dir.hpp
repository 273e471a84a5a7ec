// TempDir: a fresh directory under the system temp folder, removed with its contents
// when the object goes out of scope.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace fedcore::testing {

class TempDir {
 public:
  // mkdtemp creates a directory that did not exist: a name made from the pid could meet
  // the leftovers of a killed earlier process that had the same pid.
  TempDir() {
    std::string name = (std::filesystem::temp_directory_path() / "fedcore-test-XXXXXX").string();
    if (::mkdtemp(name.data()) == nullptr) {
      throw std::filesystem::filesystem_error("mkdtemp", name,
                                              std::error_code(errno, std::generic_category()));
    }
    path_ = name;
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
