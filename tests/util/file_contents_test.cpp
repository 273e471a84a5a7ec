#include "shared/util/file_contents.hpp"

#include <cerrno>
#include <cstdint>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "tests/temp_dir.hpp"

namespace fedcore {
namespace {

std::vector<std::byte> pattern(std::size_t size) {
  std::vector<std::byte> bytes(size);
  std::uint32_t x = 2463534242u;
  for (auto& b : bytes) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<std::byte>(x);
  }
  return bytes;
}

std::vector<std::byte> read_back(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  for (std::size_t i = 0; i < chars.size(); ++i) {
    bytes[i] = static_cast<std::byte>(chars[i]);
  }
  return bytes;
}

result<WritePath> write(const std::string& path, const std::vector<std::byte>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0) << path;
  auto done = write_new_file_contents(fd, bytes, path);
  EXPECT_EQ(::fsync(fd), 0);
  EXPECT_EQ(::close(fd), 0);
  return done;
}

// Whether this folder's file system takes direct I/O at all (tmpfs may not).
bool supports_direct(const std::string& dir) {
  const std::string probe = dir + "/probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  }
  return fd >= 0;
}

// How many of the file's pages the page cache holds.
std::size_t resident_pages(const std::string& path, std::size_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((size + page - 1) / page);
  EXPECT_EQ(::mincore(map, size, in_core.data()), 0);
  ::munmap(map, size);
  std::size_t resident = 0;
  for (auto c : in_core) {
    resident += c & 1;
  }
  return resident;
}

TEST(FileContents, EverySizeReadsBackExactlyAroundTheBlocksAndTheThreshold) {
  testing::TempDir dir;
  const std::size_t sizes[] = {0,
                               1,
                               4095,
                               4096,
                               kDirectWriteMinBytes - 1,
                               kDirectWriteMinBytes,
                               kDirectWriteMinBytes + 4096,
                               (std::size_t{9} << 20) + 77};
  for (const auto size : sizes) {
    const auto path = dir.path("f" + std::to_string(size));
    const auto bytes = pattern(size);
    auto done = write(path, bytes);
    ASSERT_TRUE(done) << done.error().to_string();
    EXPECT_EQ(read_back(path), bytes) << size;
    if (size < kDirectWriteMinBytes) {
      EXPECT_EQ(*done, WritePath::buffered) << size;
    }
  }
}

TEST(FileContents, ALargeFileBypassesThePageCacheWhereTheFileSystemAllows) {
  testing::TempDir dir;
  if (!supports_direct(dir.path())) {
    GTEST_SKIP() << "the temp folder's file system has no direct I/O";
  }
  const std::size_t size = (std::size_t{8} << 20) + 100;
  const auto path = dir.path("big");
  auto done = write(path, pattern(size));
  ASSERT_TRUE(done) << done.error().to_string();
  EXPECT_EQ(*done, WritePath::direct);
  // Only the buffered tail's page may be cached; a buffered write leaves all 2,049.
  EXPECT_LE(resident_pages(path, size), 1u);
  EXPECT_EQ(read_back(path), pattern(size));
}

// A file given in pieces (a header, the parameters where they lie, a checksum) is the
// same file: cut at odd places, across the 4 MiB chunks and the block of the tail, with
// empty pieces on the way.
TEST(FileContents, PiecesWriteTheSameFileAsTheWhole) {
  testing::TempDir dir;
  const std::size_t size = (std::size_t{9} << 20) + 4099;
  const auto bytes = pattern(size);
  const std::vector<std::vector<std::size_t>> cuts = {
      {},
      {0, 0, 37},
      {37, 4096, (std::size_t{4} << 20) - 1, (std::size_t{4} << 20) + 1},
      {size - 4, size - 4, size},
      {(std::size_t{9} << 20) + 1},
  };
  for (std::size_t c = 0; c < cuts.size(); ++c) {
    std::vector<std::span<const std::byte>> parts;
    std::size_t from = 0;
    for (const auto at : cuts[c]) {
      parts.emplace_back(bytes.data() + from, at - from);
      from = at;
    }
    parts.emplace_back(bytes.data() + from, size - from);
    const auto path = dir.path("pieces" + std::to_string(c));
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    auto done = write_new_file_contents(fd, ByteParts(parts), path);
    ASSERT_EQ(::close(fd), 0);
    ASSERT_TRUE(done) << done.error().to_string();
    EXPECT_EQ(read_back(path), bytes) << "cuts #" << c;
  }
}

TEST(FileContents, AWriteTheFileRefusesIsAnIoErrorNamingTheFile) {
  testing::TempDir dir;
  const auto path = dir.path("read-only");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  for (const std::size_t size : {std::size_t{10}, std::size_t{2} << 20}) {
    auto done = write_new_file_contents(fd, pattern(size), path);
    ASSERT_FALSE(done);
    EXPECT_EQ(done.error().code, errc::io_error);
    EXPECT_NE(done.error().message.find("cannot write '" + path + "'"), std::string::npos)
        << done.error().message;
  }
  ::close(fd);
}

}  // namespace
}  // namespace fedcore
