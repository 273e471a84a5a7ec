// The fuzz targets' entry point when they are built without libFuzzer (GCC, the ASan +
// UBSan tree of scripts/sanitize.sh): every file named on the command line, or found in a
// directory named there, is read and passed to LLVMFuzzerTestOneInput once, as
// `fuzzer -runs=0 corpus/` would. This is how the per-push CI replays the committed corpora
// (crash reproducers included) without building the clang tree; finding new inputs stays
// with libFuzzer (make fuzz, docs/fuzzing.md).
//
// Exit status: 0 when every input ran (a sanitizer report aborts the process first), 2 for
// a usage error or an unreadable path, so an empty or missing corpus never passes silently.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;

bool read_file(const fs::path& path, std::vector<std::uint8_t>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return false;
  }
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

// The regular files under `root` (or `root` itself), sorted so that a failure names the
// same input on every machine.
bool collect(const fs::path& root, std::vector<fs::path>& files) {
  std::error_code ec;
  if (fs::is_regular_file(root, ec)) {
    files.push_back(root);
    return true;
  }
  if (!fs::is_directory(root, ec)) {
    return false;
  }
  std::vector<fs::path> found;
  for (const auto& entry : fs::recursive_directory_iterator(root, ec)) {
    if (entry.is_regular_file()) {
      found.push_back(entry.path());
    }
  }
  std::sort(found.begin(), found.end());
  files.insert(files.end(), found.begin(), found.end());
  return !ec;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    if (!collect(argv[i], files)) {
      std::fprintf(stderr, "%s: '%s' is neither a readable file nor a directory\n", argv[0],
                   argv[i]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "%s: no input files found\n", argv[0]);
    return 2;
  }
  std::vector<std::uint8_t> bytes;
  for (const auto& file : files) {
    if (!read_file(file, bytes)) {
      std::fprintf(stderr, "%s: cannot read '%s'\n", argv[0], file.c_str());
      return 2;
    }
    // An empty vector's data() may be null; libFuzzer passes a valid pointer, so do we.
    static const std::uint8_t empty = 0;
    LLVMFuzzerTestOneInput(bytes.empty() ? &empty : bytes.data(), bytes.size());
  }
  std::printf("replayed %zu inputs\n", files.size());
  return 0;
}
