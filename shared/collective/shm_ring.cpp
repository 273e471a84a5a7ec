#include "shared/collective/shm_ring.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

#include "shared/util/assert.hpp"

namespace fedcore::collective {

// The first bytes of the mapping. `consumed` lives on its own cache line: the receiver
// writes it while the sender reads it, and the payload bytes must not share that line.
struct ShmRing::Header {
  std::uint64_t magic;
  std::uint64_t cookie;
  std::uint64_t capacity;
  alignas(64) std::atomic<std::uint64_t> consumed;
};

namespace {

constexpr std::uint64_t kMagic = 0x676e6952726f6346;  // "FcorRing"
// The payload area starts here, on a cache line of its own.
constexpr std::size_t kDataOffset = 128;
static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "the ring's counter is shared between processes and must be lock-free");

std::size_t round_up(std::size_t n) {
  return (n + ShmRing::kAlignment - 1) / ShmRing::kAlignment * ShmRing::kAlignment;
}

error os_error(const std::string& what) {
  return fail(errc::io_error, what + ": " + std::strerror(errno));
}

result<std::uint64_t> random_word() {
  std::uint64_t word = 0;
  if (getrandom(&word, sizeof(word), 0) != static_cast<ssize_t>(sizeof(word)))
    return os_error("getrandom");
  return word;
}

// Maps `size` bytes of the shared-memory object open as `fd`, then closes `fd` (the
// mapping keeps the object alive).
result<void*> map_and_close(int fd, std::size_t size, const std::string& name) {
  void* mapping = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mapping == MAP_FAILED)
    return os_error("mmap " + name);
  return mapping;
}

}  // namespace

ShmRing::Header* ShmRing::header() const noexcept {
  return static_cast<Header*>(mapping_);
}

std::byte* ShmRing::data() const noexcept {
  return static_cast<std::byte*>(mapping_) + kDataOffset;
}

result<ShmRing> ShmRing::create(std::size_t capacity) {
  if (capacity == 0)
    return fail(errc::invalid_argument, "shared-memory ring of 0 bytes");
  auto id_high = random_word();
  auto id_low = random_word();
  auto cookie = random_word();
  if (!id_high || !id_low || !cookie)
    return !id_high ? id_high.error() : !id_low ? id_low.error() : cookie.error();
  // 128 random bits: unguessable, and no clash with another job's rings.
  char name[64];
  std::snprintf(name, sizeof(name), "/fedcore-ring-%016llx%016llx",
                static_cast<unsigned long long>(*id_high),
                static_cast<unsigned long long>(*id_low));

  ShmRing ring;
  ring.capacity_ = round_up(capacity);
  ring.mapping_size_ = kDataOffset + ring.capacity_;
  const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    return os_error(std::string("shm_open ") + name);
  ring.name_ = name;
  ring.linked_ = true;  // from here on the destructor removes the name
  // Reserve every page now: tmpfs hands out pages on first touch, and a full /dev/shm
  // (64 MB in a default container) would then kill the writer with SIGBUS mid-job.
  // Reserved, a full /dev/shm is an error here, and the pair uses its socket instead.
  if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(ring.mapping_size_)); err != 0) {
    errno = err;
    auto e =
        os_error("reserving " + std::to_string(ring.mapping_size_) + " bytes for " + ring.name_);
    close(fd);
    return e;
  }
  auto mapping = map_and_close(fd, ring.mapping_size_, ring.name_);
  if (!mapping)
    return mapping.error();
  ring.mapping_ = *mapping;
  ring.cookie_ = *cookie;
  Header* h = new (*mapping) Header{kMagic, *cookie, ring.capacity_, {}};
  h->consumed.store(0, std::memory_order_release);
  return ring;
}

result<ShmRing> ShmRing::open(const std::string& name, std::uint64_t cookie, std::size_t capacity) {
  if (name.empty() || name.front() != '/' || name.find('/', 1) != std::string::npos)
    return fail(errc::invalid_argument, "shared-memory ring name '" + name + "' is malformed");
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    if (errno == ENOENT)
      return fail(errc::not_found, "no shared-memory ring " + name + " on this host");
    return os_error("shm_open " + name);
  }
  // Only one reader per ring: the name is not needed any more.
  shm_unlink(name.c_str());
  ShmRing ring;
  ring.name_ = name;
  ring.capacity_ = capacity;
  ring.mapping_size_ = kDataOffset + capacity;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    auto e = os_error("fstat " + name);
    close(fd);
    return e;
  }
  if (capacity == 0 || capacity % kAlignment != 0 ||
      static_cast<std::size_t>(st.st_size) != ring.mapping_size_) {
    close(fd);
    return fail(errc::invalid_argument, "shared-memory ring " + name + " has " +
                                            std::to_string(st.st_size) + " bytes, expected " +
                                            std::to_string(ring.mapping_size_));
  }
  auto mapping = map_and_close(fd, ring.mapping_size_, name);
  if (!mapping)
    return mapping.error();
  ring.mapping_ = *mapping;
  const Header* h = ring.header();
  if (h->magic != kMagic || h->cookie != cookie || h->capacity != capacity)
    return fail(errc::invalid_argument, "shared-memory ring " + name + " is not the one offered");
  ring.cookie_ = cookie;
  return ring;
}

void ShmRing::swap(ShmRing& other) noexcept {
  std::swap(name_, other.name_);
  std::swap(linked_, other.linked_);
  std::swap(cookie_, other.cookie_);
  std::swap(capacity_, other.capacity_);
  std::swap(mapping_, other.mapping_);
  std::swap(mapping_size_, other.mapping_size_);
  std::swap(produced_, other.produced_);
  std::swap(viewed_end_, other.viewed_end_);
}

ShmRing::ShmRing(ShmRing&& other) noexcept {
  swap(other);
}

ShmRing& ShmRing::operator=(ShmRing&& other) noexcept {
  ShmRing old(std::move(other));  // leaves `other` empty; `old` unmaps what we had
  swap(old);
  return *this;
}

ShmRing::~ShmRing() {
  unlink();
  if (mapping_)
    munmap(mapping_, mapping_size_);
}

void ShmRing::unlink() noexcept {
  if (linked_) {
    shm_unlink(name_.c_str());
    linked_ = false;
  }
}

std::optional<ShmRing::Placement> ShmRing::try_write(std::span<const std::byte> payload) noexcept {
  FEDCORE_ASSERT(mapping_ != nullptr, "try_write on a moved-from ring");
  const std::uint64_t size = round_up(payload.size());
  if (size == 0 || size > capacity_)
    return std::nullopt;
  std::uint64_t position = produced_;
  std::uint64_t offset = position % capacity_;
  if (offset + size > capacity_) {
    position += capacity_ - offset;
    offset = 0;
  }
  // Acquire: the receiver's reads of the space it released happened before its release.
  const std::uint64_t consumed = header()->consumed.load(std::memory_order_acquire);
  if (position + size - consumed > capacity_)
    return std::nullopt;
  std::memcpy(data() + offset, payload.data(), payload.size());
  // The frame announcing this payload goes through a system call after this, which
  // orders the copy before the receiver's reads; the fence says so in the language too.
  std::atomic_thread_fence(std::memory_order_release);
  produced_ = position + size;
  return Placement{offset, produced_};
}

result<std::span<const std::byte>> ShmRing::view(Placement placement, std::uint64_t length) {
  FEDCORE_ASSERT(mapping_ != nullptr, "view on a moved-from ring");
  const std::uint64_t size = round_up(length);
  const bool fits = length > 0 && placement.offset % kAlignment == 0 &&
                    placement.offset <= capacity_ && size <= capacity_ - placement.offset;
  const bool in_order = placement.end > viewed_end_ && placement.end - viewed_end_ <= capacity_ &&
                        placement.end >= size &&
                        (placement.end - size) % capacity_ == placement.offset;
  if (!fits || !in_order) {
    return fail(errc::data_loss,
                "shared-memory placement offset " + std::to_string(placement.offset) + " end " +
                    std::to_string(placement.end) + " length " + std::to_string(length) +
                    " is outside the ring or out of order");
  }
  viewed_end_ = placement.end;
  std::atomic_thread_fence(std::memory_order_acquire);
  return std::span<const std::byte>(data() + placement.offset, length);
}

void ShmRing::release(std::uint64_t end) noexcept {
  FEDCORE_ASSERT(end <= viewed_end_, "releasing space that was never viewed");
  header()->consumed.store(end, std::memory_order_release);
}

}  // namespace fedcore::collective
