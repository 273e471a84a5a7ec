#include "server/federation/update_buffer.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/federation/robust_aggregation.hpp"
#include "shared/util/rng.hpp"
#include "tests/mount_namespace.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::federation {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();

// Rows of arbitrary bit patterns: NaNs with payloads, infinities, -0, subnormals. Only a
// byte-for-byte copy brings them all back.
std::vector<std::vector<float>> bit_pattern_rows(std::size_t n, std::size_t dim,
                                                 std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<float>> rows(n, std::vector<float>(dim));
  for (auto& row : rows) {
    for (auto& v : row) {
      const auto bits = static_cast<std::uint32_t>(rng.next_u64());
      std::memcpy(&v, &bits, sizeof bits);
    }
  }
  return rows;
}

bool same_bytes(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

std::vector<std::string> entries_of(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

// Descriptors of this process open on deleted files in `dir` (the unlinked scratch files).
int deleted_files_open_in(const std::filesystem::path& dir) {
  int count = 0;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ignored;
    const auto target = std::filesystem::read_symlink(fd.path(), ignored).string();
    if (target.rfind(dir.string() + "/", 0) == 0 && target.ends_with(" (deleted)")) {
      ++count;
    }
  }
  return count;
}

// Kilobytes of this process's resident set in mappings of files under `dir`.
long resident_kib_of_mappings_in(const std::filesystem::path& dir) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool counting = false;
  long kib = 0;
  while (std::getline(smaps, line)) {
    if (line.find('-') < line.find(' ') && line.find(' ') != std::string::npos &&
        !line.starts_with("Rss:")) {
      // A mapping's header line: "start-end perms offset dev inode path".
      if (line.find_first_of("0123456789abcdef") == 0) {
        counting = line.find(dir.string() + "/") != std::string::npos;
        continue;
      }
    }
    if (counting && line.starts_with("Rss:")) {
      std::istringstream fields(line.substr(4));
      long value = 0;
      fields >> value;
      kib += value;
    }
  }
  return kib;
}

void add_all(UpdateBuffer& buffer, const std::vector<std::vector<float>>& rows) {
  for (const auto& row : rows) {
    auto added = buffer.add(row);
    ASSERT_TRUE(added) << added.error().message;
  }
}

TEST(UpdateBuffer, KeepsWholeRowsInMemoryUpToTheBudget) {
  testing::TempDir dir;
  UpdateBuffer buffer(10, 100, dir.root());  // 40-byte rows: two fit in 100 bytes
  EXPECT_EQ(buffer.dim(), 10u);
  const auto rows = bit_pattern_rows(5, 10, 1);
  add_all(buffer, {rows[0], rows[1]});
  EXPECT_EQ(buffer.bytes_in_memory(), 80u);
  EXPECT_EQ(buffer.bytes_spilled(), 0u);
  EXPECT_EQ(deleted_files_open_in(dir.root()), 0);  // no file until one is needed
  add_all(buffer, {rows[2], rows[3], rows[4]});
  EXPECT_EQ(buffer.size(), 5u);
  EXPECT_EQ(buffer.bytes_in_memory(), 80u);
  EXPECT_EQ(buffer.bytes_spilled(), 120u);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_TRUE(same_bytes(buffer.row(i), rows[i])) << i;
  }
}

TEST(UpdateBuffer, SpilledRowsComeBackBitForBitFromAnUnlinkedFile) {
  testing::TempDir dir;
  const std::size_t dim = 1000;
  UpdateBuffer buffer(dim, 3 * dim * sizeof(float), dir.root());
  const auto rows = bit_pattern_rows(20, dim, 2);
  add_all(buffer, rows);
  EXPECT_EQ(buffer.bytes_in_memory(), 3 * dim * sizeof(float));
  EXPECT_EQ(buffer.bytes_spilled(), 17 * dim * sizeof(float));
  // The file is open, and has no name in the directory.
  EXPECT_EQ(deleted_files_open_in(dir.root()), 1);
  EXPECT_THAT(entries_of(dir.root()), ::testing::IsEmpty());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ASSERT_TRUE(same_bytes(buffer.row(i), rows[i])) << i;
  }
  // Releasing pages loses nothing: they are read back from the file.
  buffer.release_spilled(0, dim);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ASSERT_TRUE(same_bytes(buffer.row(i), rows[i])) << i;
  }
}

TEST(UpdateBuffer, RowsLargerThanAnExtentGetOneEachAndNeverMove) {
  testing::TempDir dir;
  const std::size_t dim = (std::size_t{4} << 20) / sizeof(float) + 3;  // 4 MiB + 12 bytes
  UpdateBuffer buffer(dim, 0, dir.root());                             // everything spills
  const auto rows = bit_pattern_rows(3, dim, 3);
  add_all(buffer, {rows[0]});
  const float* first = buffer.row(0).data();
  add_all(buffer, {rows[1], rows[2]});
  EXPECT_EQ(buffer.row(0).data(), first);
  EXPECT_EQ(buffer.bytes_in_memory(), 0u);
  EXPECT_EQ(buffer.bytes_spilled(), 3 * dim * sizeof(float));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ASSERT_TRUE(same_bytes(buffer.row(i), rows[i])) << i;
  }
}

TEST(UpdateBuffer, ClearClosesTheFileAndTheBufferCanBeFilledAgain) {
  testing::TempDir dir;
  UpdateBuffer buffer(100, 400, dir.root());  // one row in memory
  add_all(buffer, bit_pattern_rows(4, 100, 4));
  EXPECT_EQ(deleted_files_open_in(dir.root()), 1);
  buffer.clear();
  EXPECT_EQ(buffer.size(), 0u);
  EXPECT_EQ(buffer.bytes_in_memory(), 0u);
  EXPECT_EQ(buffer.bytes_spilled(), 0u);
  EXPECT_EQ(deleted_files_open_in(dir.root()), 0);
  const auto rows = bit_pattern_rows(3, 100, 5);
  add_all(buffer, rows);
  EXPECT_EQ(buffer.bytes_spilled(), 800u);
  EXPECT_EQ(deleted_files_open_in(dir.root()), 1);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_TRUE(same_bytes(buffer.row(i), rows[i])) << i;
  }
}

TEST(UpdateBuffer, AMissingScratchDirectoryIsNotFoundAndTheBufferUnchanged) {
  testing::TempDir dir;
  const auto missing = dir.root() / "no-such-dir";
  UpdateBuffer buffer(4, 16, missing);
  const std::vector<float> row{1, 2, 3, 4};
  ASSERT_TRUE(buffer.add(row));
  auto refused = buffer.add(row);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::not_found);
  EXPECT_EQ(refused.error().message,
            "cannot create a scratch file in '" + missing.string() +
                "' for the updates beyond the memory budget of 16 bytes: No such file or "
                "directory");
  EXPECT_EQ(buffer.size(), 1u);
  EXPECT_EQ(buffer.bytes_spilled(), 0u);
  EXPECT_TRUE(same_bytes(buffer.row(0), row));
}

TEST(UpdateBuffer, AScratchPathThatIsAFileIsRefused) {
  testing::TempDir dir;
  std::ofstream(dir.path("plain-file")) << "x";
  UpdateBuffer buffer(4, 0, dir.path("plain-file"));
  auto refused = buffer.add(std::vector<float>{1, 2, 3, 4});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::not_found);
  EXPECT_THAT(refused.error().message, HasSubstr("'" + dir.path("plain-file") + "'"));
  EXPECT_THAT(refused.error().message, HasSubstr("Not a directory"));
}

TEST(UpdateBuffer, AReadOnlyScratchDirectoryIsPermissionDenied) {
  // Root writes through mode bits, so the directory is made read-only by a mount.
  FEDCORE_REQUIRE_MOUNTS(testing::enter_mount_namespace());
  testing::TempDir dir;
  auto read_only = testing::bind_read_only(dir.root().string());
  ASSERT_TRUE(read_only) << read_only.error().message;
  UpdateBuffer buffer(4, 0, dir.root());
  auto refused = buffer.add(std::vector<float>{1, 2, 3, 4});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::permission_denied);
  EXPECT_EQ(refused.error().message,
            "cannot create a scratch file in '" + dir.root().string() +
                "' for the updates beyond the memory budget of 0 bytes: Read-only file system");
  EXPECT_TRUE(read_only->unmount());
}

// A full disk is an error of add(), for the row that no longer fits (each row's blocks are
// reserved there), never a SIGBUS later when a mapped page is first touched. 384 KiB rows
// on a 1 MiB file system: two fit, the third is refused, and the two stay readable.
TEST(UpdateBuffer, AFullDiskIsResourceExhaustedAtAddForTheRowThatNoLongerFits) {
  FEDCORE_REQUIRE_MOUNTS(testing::enter_mount_namespace());
  testing::TempDir dir;
  auto tmpfs = testing::mount_tmpfs(dir.root().string(), 1 << 20);
  ASSERT_TRUE(tmpfs) << tmpfs.error().message;
  {
    const std::size_t dim = 384 * 1024 / sizeof(float);
    UpdateBuffer buffer(dim, 0, dir.root());
    const auto rows = bit_pattern_rows(3, dim, 6);
    add_all(buffer, {rows[0], rows[1]});
    auto refused = buffer.add(rows[2]);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, errc::resource_exhausted);
    EXPECT_THAT(refused.error().message,
                StartsWith("cannot reserve 393216 bytes for an update in the scratch file '" +
                           dir.root().string() + "/fedcore-updates-"));
    EXPECT_THAT(refused.error().message,
                HasSubstr("' (unlinked), which holds 2 already: No space left on device"));
    EXPECT_EQ(buffer.size(), 2u);
    EXPECT_EQ(buffer.bytes_spilled(), 2 * dim * sizeof(float));
    EXPECT_TRUE(same_bytes(buffer.row(0), rows[0]));
    EXPECT_TRUE(same_bytes(buffer.row(1), rows[1]));
    EXPECT_THAT(entries_of(dir.root()), ::testing::IsEmpty());
  }
  EXPECT_TRUE(tmpfs->unmount());
}

// The larger case: the median of 50 updates of 100,000 parameters with a 1 MB
// budget (2 rows in memory, 48 in the scratch file) is the in-memory median bit for bit,
// and the pass leaves almost none of the file resident.
TEST(UpdateBuffer, MedianOf50UpdatesWithA1MBBudgetIsTheInMemoryMedian) {
  testing::TempDir dir;
  const std::size_t n = 50;
  const std::size_t dim = 100'000;
  Rng rng(9);
  UpdateBuffer limited(dim, 1'000'000, dir.root());
  UpdateBuffer unlimited(dim, kUnlimited, dir.root());
  std::vector<float> row(dim);
  for (std::size_t i = 0; i < n; ++i) {
    for (auto& v : row) {
      v = static_cast<float>(rng.normal());
    }
    ASSERT_TRUE(limited.add(row));
    ASSERT_TRUE(unlimited.add(row));
  }
  EXPECT_EQ(limited.bytes_in_memory(), 2 * dim * sizeof(float));
  EXPECT_EQ(limited.bytes_spilled(), 48 * dim * sizeof(float));
  EXPECT_EQ(unlimited.bytes_spilled(), 0u);
  std::vector<float> from_file(dim);
  std::vector<float> from_memory(dim);
  coordinate_median(limited, from_file);
  coordinate_median(unlimited, from_memory);
  EXPECT_TRUE(same_bytes(from_file, from_memory));
  // The spilled rows are 19 MB; after the pass (which releases behind itself) next to none of
  // them is still mapped in. Without the release, 15 MB were.
  EXPECT_LT(resident_kib_of_mappings_in(dir.root()), 1024);
  limited.release_spilled(0, dim);
  // The median of 50 standard normals is near 0.
  double mean = 0;
  for (float v : from_file) {
    mean += v;
  }
  EXPECT_NEAR(mean / double(dim), 0.0, 0.01);
}

}  // namespace
}  // namespace fedcore::federation
