#include "shared/collective/shm_ring.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
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

// The first bytes of the mapping. Each counter the two sides write lives on its own cache
// line, and the records start on a line of their own.
struct ShmRing::Header {
  std::uint64_t magic;
  std::uint64_t cookie;
  std::uint64_t capacity;
  alignas(64) std::atomic<std::uint64_t> consumed;   // receiver writes, sender reads
  alignas(64) std::atomic<std::uint64_t> published;  // sender writes, receiver reads
  std::atomic<std::uint64_t> restarted_from;         // sender writes, receiver reads
  alignas(64) std::atomic<std::uint32_t> sleeping;   // receiver writes, sender reads
};

namespace {

constexpr std::uint64_t kMagic = 0x676e6952726f6346;  // "FcorRing"
// The record area starts here, on a cache line of its own.
constexpr std::size_t kDataOffset = 256;
static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "the ring's counters are shared between processes and must be lock-free");

// The 64-byte block that starts every record.
enum class BlockKind : std::uint32_t { record = 0x52454331, skip = 0x534b4950 };  // "REC1", "SKIP"
struct Block {
  BlockKind kind;
  std::uint32_t head_length;
  std::uint64_t payload_length;
  std::byte head[ShmRing::kMaxHead];
};
static_assert(sizeof(Block) == ShmRing::kAlignment);

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
// mapping keeps the object alive). The page tables are filled now (MAP_POPULATE): else
// the first pass through the ring takes a page fault every 4 KiB on both sides, which
// for small messages cost more than the messages themselves.
result<void*> map_and_close(int fd, std::size_t size, const std::string& name) {
  void* mapping = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
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

  static_assert(sizeof(Header) <= kDataOffset);
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
  Header* h = new (*mapping) Header{kMagic, *cookie, ring.capacity_, {}, {}, {}, {}};
  h->consumed.store(0, std::memory_order_release);
  h->published.store(0, std::memory_order_release);
  h->restarted_from.store(0, std::memory_order_release);
  h->sleeping.store(0, std::memory_order_release);
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
  std::swap(read_end_, other.read_end_);
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

bool ShmRing::wrap_early(std::uint64_t position, std::uint64_t held_from,
                         std::uint64_t size) const noexcept {
  const std::uint64_t lap_start = position - position % capacity_;
  if (held_from < lap_start)  // the records still held run past the buffer's end
    return false;
  const std::uint64_t free_at_start = held_from - lap_start;
  const std::uint64_t held = position - held_from;
  // Why: a collective holds a record or two at a time, and a ring that moves on with every
  // message keeps its lines out of the caches (the restart's reason). Why the margin:
  // after the wrap, the room ahead of the held records is what is free at the start; with
  // at least as much again as is held now, a sender that keeps the same number of bytes
  // in flight still finds room, where the tail would have given it plenty.
  return size + held <= free_at_start;
}

bool ShmRing::try_write(std::span<const std::byte> head,
                        std::span<const std::byte> payload) noexcept {
  FEDCORE_ASSERT(mapping_ != nullptr, "try_write on a moved-from ring");
  FEDCORE_ASSERT(head.size() <= kMaxHead, "record head too long");
  const std::uint64_t size = sizeof(Block) + round_up(payload.size());
  if (size > capacity_)
    return false;
  std::uint64_t position = produced_;
  std::uint64_t offset = position % capacity_;
  // Acquire: the receiver's reads of the space it released happened before its release.
  const std::uint64_t consumed = header()->consumed.load(std::memory_order_acquire);
  if (consumed == produced_ && offset != 0) {
    // Empty: start again at the buffer's start (the header's "Space"). Why: a collective
    // sends one message per step and waits, so a ring of 16 MiB that moves on with every
    // message keeps its lines out of the caches; measured outside the repository on 2
    // processes, a 4 MiB copy into shared memory plus the peer's add ran at 15 GB/s into
    // one region and at 7 GB/s marching through 16 MiB (docs/results.md). The receiver
    // jumps when it reaches `restarted_from`, which is published with the record.
    header()->restarted_from.store(position, std::memory_order_relaxed);
    position += capacity_ - offset;
    restarted_at_ = position;
    write_record(0, head, payload);
    publish(position + size);
    return true;
  }
  const std::uint64_t tail = capacity_ - offset;  // a multiple of 64, never 0
  // After a restart, nothing before it holds a record, consumed or not.
  const std::uint64_t held_from = std::max(consumed, restarted_at_);
  const bool wraps = size > tail || wrap_early(position, held_from, size);
  if (wraps)
    position += tail;
  // The record's end within `capacity` of what was consumed also frees the skipped tail.
  if (position + size - held_from > capacity_)
    return false;
  if (wraps) {
    Block skip{BlockKind::skip, 0, 0, {}};
    std::memcpy(data() + offset, &skip, sizeof(skip));
    offset = 0;
  }
  write_record(offset, head, payload);
  publish(position + size);
  return true;
}

void ShmRing::write_record(std::uint64_t offset, std::span<const std::byte> head,
                           std::span<const std::byte> payload) noexcept {
  Block block{BlockKind::record, static_cast<std::uint32_t>(head.size()), payload.size(), {}};
  if (!head.empty())
    std::memcpy(block.head, head.data(), head.size());
  std::memcpy(data() + offset, &block, sizeof(block));
  if (!payload.empty())
    std::memcpy(data() + offset + sizeof(Block), payload.data(), payload.size());
}

void ShmRing::publish(std::uint64_t end) noexcept {
  produced_ = end;
  // Sequentially consistent, not just release: it pairs with the receiver's store to
  // `sleeping` and the sender's load of it that follows (see "Sleeping").
  header()->published.store(produced_, std::memory_order_seq_cst);
}

bool ShmRing::receiver_sleeping() const noexcept {
  return header()->sleeping.load(std::memory_order_seq_cst) != 0;
}

result<std::optional<ShmRing::Record>> ShmRing::read() {
  FEDCORE_ASSERT(mapping_ != nullptr, "read on a moved-from ring");
  const std::uint64_t published = header()->published.load(std::memory_order_seq_cst);
  if (published == read_end_)
    return std::optional<Record>();
  const auto malformed = [&](const std::string& what) {
    return fail(errc::data_loss,
                "shared-memory record at ring position " + std::to_string(read_end_) + ": " + what);
  };
  const auto out_of_order = [&] {
    return malformed("published position " + std::to_string(published) + " is out of order");
  };
  if (published < read_end_)
    return out_of_order();
  std::uint64_t position = read_end_;
  std::uint64_t offset = position % capacity_;
  // After `published`, so a restart published with it is seen (the sender stores it first).
  if (offset != 0 && header()->restarted_from.load(std::memory_order_relaxed) == position) {
    position += capacity_ - offset;
    offset = 0;
    if (position >= published)
      return malformed("a restart with nothing behind it");
  }
  if (published - position > capacity_)
    return out_of_order();
  Block block;
  std::memcpy(&block, data() + offset, sizeof(block));
  if (block.kind == BlockKind::skip) {
    position += capacity_ - offset;
    offset = 0;
    if (position >= published)
      return malformed("a skip block with nothing behind it");
    std::memcpy(&block, data(), sizeof(block));
  }
  if (block.kind != BlockKind::record || block.head_length > kMaxHead)
    return malformed("not a record");
  // Written this way so that no length, however large, can overflow the sum.
  const std::uint64_t room = capacity_ - offset - sizeof(Block);
  if (block.payload_length > room ||
      sizeof(Block) + round_up(block.payload_length) > published - position)
    return malformed("payload of " + std::to_string(block.payload_length) +
                     " bytes runs past what was published");
  const std::byte* start = data() + offset;
  Record record;
  // The head is read from the ring, not from the local copy: the span must outlive `block`.
  record.head = std::span<const std::byte>(start + offsetof(Block, head), block.head_length);
  record.payload = std::span<const std::byte>(start + sizeof(Block), block.payload_length);
  record.end = position + sizeof(Block) + round_up(block.payload_length);
  read_end_ = record.end;
  return std::optional<Record>(record);
}

void ShmRing::release(std::uint64_t end) noexcept {
  FEDCORE_ASSERT(end <= read_end_, "releasing space that was never read");
  header()->consumed.store(end, std::memory_order_release);
}

void ShmRing::set_sleeping(bool sleeping) noexcept {
  header()->sleeping.store(sleeping ? 1 : 0, std::memory_order_seq_cst);
}

}  // namespace fedcore::collective
