// ShmRing: a one-way byte ring in POSIX shared memory, the payload lane between two
// ranks of a NetTransport that run on the same host.
//
// Setup. The sending rank creates the ring (a randomly named /dev/shm object, mode 0600,
// a random cookie in its header) and tells the receiving rank the name and cookie over
// their already connected (and, with TLS, authenticated) link. The receiver opens it,
// checks size and cookie, and removes the name at once; the sender removes it too when
// the handshake ends either way, so no name outlives a link's setup and a crash leaves
// nothing in /dev/shm. A receiver on another host simply fails to open it, and the pair
// keeps sending payloads over the socket.
//
// Use. The sender copies a payload into the ring (try_write) and sends, over the link, a
// frame that carries the envelope and the placement instead of the bytes; the receiver
// reads the bytes in place (view) and hands their space back once it is done with them
// (release). So the link still orders messages, carries the envelopes that catch a
// desync, and reports a dead peer, while the bulk bytes skip the kernel's socket copies.
// Because the sender copies, its caller may reuse its buffer at once, and a receiver
// never reads memory the sending process has freed.
//
// Space. Positions are byte counts since the ring was made (monotonic). A placement
// starts on a 64-byte boundary; one that would run past the end of the buffer starts at
// offset 0 instead, the skipped tail counting as used. Space comes back in order: a
// release frees everything up to the released message's end. When there is no room,
// try_write says so and the sender sends that payload over the socket: nobody ever
// waits for ring space, so the ring adds no way to deadlock.
//
// Thread safety: one sender thread and one receiver thread (in another process, or
// another thread of this one); the shared `consumed` counter is their only contact.
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

  // Where a payload sits: its offset in the buffer and the ring position just after it.
  struct Placement {
    std::uint64_t offset = 0;
    std::uint64_t end = 0;
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

  // Sender: copies `payload` into the ring, or returns nullopt when there is no room now
  // (or it is empty, or larger than the ring).
  std::optional<Placement> try_write(std::span<const std::byte> payload) noexcept;

  // Receiver: the `length` bytes at `placement`, checked against the buffer's bounds and
  // the order of earlier placements. Errors: data_loss (a placement no sender made).
  result<std::span<const std::byte>> view(Placement placement, std::uint64_t length);
  // Receiver: gives back the space of every viewed payload up to `end`.
  void release(std::uint64_t end) noexcept;

 private:
  struct Header;
  ShmRing() = default;
  void swap(ShmRing& other) noexcept;
  Header* header() const noexcept;
  std::byte* data() const noexcept;

  std::string name_;
  bool linked_ = false;
  std::uint64_t cookie_ = 0;
  std::size_t capacity_ = 0;
  void* mapping_ = nullptr;
  std::size_t mapping_size_ = 0;
  std::uint64_t produced_ = 0;    // sender: ring position after the last placement
  std::uint64_t viewed_end_ = 0;  // receiver: end of the last placement viewed
};

}  // namespace fedcore::collective
