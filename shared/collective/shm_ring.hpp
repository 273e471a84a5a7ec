// ShmRing: a one-way message ring in POSIX shared memory, the lane between two ranks of a
// NetTransport that run on the same host.
//
// Setup. The sending rank creates the ring (a randomly named /dev/shm object, mode 0600,
// a random cookie in its header) and tells the receiving rank the name and cookie over
// their already connected (and, with TLS, authenticated) link. The receiver opens it,
// checks size and cookie, and removes the name at once; the sender removes it too when
// the handshake ends either way, so no name outlives a link's setup and a crash leaves
// nothing in /dev/shm. A receiver on another host simply fails to open it, and the pair
// keeps sending everything over the socket.
//
// Use. The sender writes whole messages: a small head (the transport's envelope, at most
// kMaxHead bytes) and the payload, as one record (try_write), and publishes it in the
// ring's header. The receiver finds it there without any system call (read), reads the
// bytes in place and hands their space back once it is done with them (release). A
// receiver that polls therefore sees a message within a cache-line transfer of its
// publication; one that sleeps in the kernel needs a wake-up, which the sender sends over
// the socket when the receiver said it was going to sleep (see "Sleeping" below). Because
// the sender copies, its caller may reuse its buffer at once, and a receiver never reads
// memory the sending process has freed.
//
// Space. Positions are byte counts since the ring was made (monotonic). A record starts
// on a 64-byte boundary with a 64-byte block (kind, lengths, head), the payload after it;
// a record that would run past the end of the buffer starts at offset 0 instead, behind a
// "skip" block that tells the receiver so. Space comes back in order: a release frees
// everything up to the released record's end. A record written into an empty ring also
// starts at offset 0 (a "restart": the header names the position it jumps from, and the
// receiver follows), so that messages that come one at a time, as a collective's do,
// reuse the same memory, which stays in the caches (which needs a receiver that releases
// a message as soon as it is done with it: Transport::release); for the same reason a
// record goes to offset 0 early, behind a skip block, when the start of the buffer has
// room for it and for as many bytes again as the receiver still holds. When there is no
// room, try_write says so and the sender sends that message over the socket: nobody ever
// waits for ring space, so the ring adds no way to deadlock (the transport numbers
// messages so that the two lanes merge in order).
//
// Sleeping. Before the receiver blocks in the kernel it sets `sleeping` and looks for a
// record once more; after publishing, the sender reads `sleeping`. Both are sequentially
// consistent, so at least one of them sees the other's write: either the receiver finds
// the record and does not sleep, or the sender sees it asleep and rings the doorbell.
//
// Untrusted bytes. The ring is shared with a member of the job, as trusted as its socket,
// but a record is still checked against the ring's bounds before it is read: a bad one is
// data_loss, never an out-of-bounds read.
//
// Thread safety: one sender thread and one receiver thread (in another process, or
// another thread of this one); the shared counters and the flag are their only contact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "shared/util/error.hpp"

namespace fedcore::collective {

class ShmRing {
 public:
  static constexpr std::size_t kAlignment = 64;
  // The most bytes of head a record carries (the rest of its 64-byte block).
  static constexpr std::size_t kMaxHead = 48;

  // A record as the receiver sees it, in place in the ring.
  struct Record {
    std::span<const std::byte> head;
    std::span<const std::byte> payload;  // starts on a 64-byte boundary
    std::uint64_t end = 0;               // ring position after it: release(end) frees it
  };

  // A new ring of `capacity` bytes (rounded up to kAlignment), named and linked, its
  // pages reserved in /dev/shm. Errors: invalid_argument (capacity 0), io_error
  // (shm_open, mmap or the reservation failed, e.g. /dev/shm is too small).
  static result<ShmRing> create(std::size_t capacity);
  // The ring another rank created; removes its name. Errors: not_found (no such name:
  // another host), invalid_argument (size or cookie differ from what the creator said),
  // io_error.
  static result<ShmRing> open(const std::string& name, std::uint64_t cookie, std::size_t capacity);

  ShmRing(ShmRing&& other) noexcept;
  ShmRing& operator=(ShmRing&& other) noexcept;
  ShmRing(const ShmRing&) = delete;
  ShmRing& operator=(const ShmRing&) = delete;
  ~ShmRing();

  const std::string& name() const noexcept { return name_; }
  std::uint64_t cookie() const noexcept { return cookie_; }
  std::size_t capacity() const noexcept { return capacity_; }
  // Removes the name from /dev/shm (the mapping stays). Idempotent.
  void unlink() noexcept;

  // Sender: copies `head` and `payload` into the ring as one record and publishes it;
  // false when there is no room now (or the record is larger than the ring).
  // REQUIRES: head.size() <= kMaxHead.
  bool try_write(std::span<const std::byte> head, std::span<const std::byte> payload) noexcept;
  // Sender: whether the receiver said it is asleep in the kernel (read after try_write).
  bool receiver_sleeping() const noexcept;

  // Receiver: the next published record, or nullopt when there is none yet. Errors:
  // data_loss (a record no correct sender writes: bad kind, lengths beyond the ring).
  result<std::optional<Record>> read();
  // Receiver: gives back the space of every record read up to `end`.
  void release(std::uint64_t end) noexcept;
  // Receiver: says it is about to sleep in the kernel (true) or awake (false). After
  // setting true, read() once more before sleeping (see "Sleeping").
  void set_sleeping(bool sleeping) noexcept;

 private:
  struct Header;
  ShmRing() = default;
  void swap(ShmRing& other) noexcept;
  Header* header() const noexcept;
  std::byte* data() const noexcept;
  void write_record(std::uint64_t offset, std::span<const std::byte> head,
                    std::span<const std::byte> payload) noexcept;
  void publish(std::uint64_t end) noexcept;
  // Sender: whether a record of `size` bytes at `position` should start at offset 0 now,
  // behind a skip block, though it fits the tail: when what is free at the buffer's start
  // holds it and as many bytes again as the receiver still holds (from `held_from`).
  bool wrap_early(std::uint64_t position, std::uint64_t held_from,
                  std::uint64_t size) const noexcept;

  std::string name_;
  bool linked_ = false;
  std::uint64_t cookie_ = 0;
  std::size_t capacity_ = 0;
  void* mapping_ = nullptr;
  std::size_t mapping_size_ = 0;
  std::uint64_t produced_ = 0;      // sender: ring position after the last record
  std::uint64_t restarted_at_ = 0;  // sender: where the last restart put a record
  std::uint64_t read_end_ = 0;      // receiver: ring position after the last record read
};

}  // namespace fedcore::collective
