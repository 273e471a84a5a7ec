// Exchange: whole-buffer and half-buffer messages between two ranks for the allreduce
// algorithms that pair ranks up (recursive doubling, recursive halving and doubling).
// Not part of the public interface.
//
// A message of `n` floats moves as segment_count(n) segments of at most
// max_segment_bytes, numbered step * max_segments + j, where max_segments is the count
// for the whole buffer: every message of one operation gets its own numbers, so a rank
// that is a step ahead or behind is caught by its envelope like any other desync.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "shared/collective/collectives.hpp"

namespace fedcore::collective::detail {

// Largest power of two <= p. REQUIRES: p >= 1.
int power_of_two_floor(int p) noexcept;
// log2 of a power of two q.
std::uint32_t log2_of(int q) noexcept;

class Exchange {
 public:
  // How received floats meet the local ones.
  enum class Merge { add, copy };
  // Whether to wait for this rank's posted sends before writing: needed when the region
  // written may still be being sent (the transport sends from the caller's memory).
  enum class Sends { wait, no_wait };

  Exchange(Communicator& comm, Envelope envelope, std::size_t whole_elements,
           std::size_t max_segment_bytes, Clock::time_point deadline);

  void send(int peer, std::uint32_t step, std::span<const float> data);
  // Receives data.size() floats from `peer` into `data`. Errors: the transport's.
  result<void> receive(int peer, std::uint32_t step, std::span<float> data, Merge merge,
                       Sends sends);
  // send() and receive(add, wait) segment by segment: segment j goes out, then segment j
  // comes in and is added, so each segment is added while the peer's copy of it is still
  // in cache. The same messages, in the same order, as send() followed by receive(), so
  // the peer may use either. Errors: the transport's.
  result<void> swap_add(int peer, std::uint32_t step, std::span<float> data);

 private:
  void stamp(std::uint32_t step, std::size_t j, std::size_t elements);
  std::size_t segments_for(std::size_t elements) const noexcept;

  Transport& t_;
  Envelope envelope_;
  std::size_t max_segment_bytes_;
  std::size_t max_segments_;
  Clock::time_point deadline_;
};

}  // namespace fedcore::collective::detail
