// Helpers shared by the collective algorithms (not part of the public interface).
#pragma once

#include <chrono>
#include <cstddef>
#include <span>

#include "shared/collective/collectives.hpp"

namespace fedcore::collective::detail {

inline std::span<const std::byte> bytes_of(std::span<const float> v) noexcept {
  return std::as_bytes(v);
}

// Adds the floats of a received payload into `out` (out.size() of them). Payloads are
// heap allocations or 64-byte aligned ring records, so they are aligned for float.
inline void add_received(std::span<float> out, std::span<const std::byte> payload) noexcept {
  const float* in = reinterpret_cast<const float*>(payload.data());
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] += in[i];
}

// How many segments each chunk of up to `max_chunk_elements` floats is cut into so that
// no message exceeds `max_segment_bytes`; at least one, so that even empty chunks send a
// message and every rank checks every peer's envelope.
std::size_t segment_count(std::size_t max_chunk_elements, std::size_t element_size,
                          std::size_t max_segment_bytes) noexcept;

// Adds the elapsed time to the communicator's communication time when it goes away.
class CommTimer {
 public:
  explicit CommTimer(Communicator& comm) : comm_(comm), start_(Clock::now()) {}
  ~CommTimer() {
    comm_.add_comm_seconds(std::chrono::duration<double>(Clock::now() - start_).count());
  }
  CommTimer(const CommTimer&) = delete;
  CommTimer& operator=(const CommTimer&) = delete;

 private:
  Communicator& comm_;
  Clock::time_point start_;
};

// The ring's reduce-scatter phase (see allreduce.cpp). Afterwards rank r's chunk r of
// `data` holds the reduction; with `average` it is divided by the group size.
result<void> ring_reduce_scatter(Communicator& comm, Envelope envelope, std::span<float> data,
                                 bool average, std::size_t max_segment_bytes,
                                 Clock::time_point deadline);

// The ring's allgather phase: `data` holds n elements of `element_size` bytes cut into
// `parts` chunks by chunk_range; rank r starts owning chunk r and ends with all of them.
// `first_segment` continues the envelope's message numbering.
result<void> ring_allgather(Communicator& comm, Envelope envelope, std::span<std::byte> data,
                            std::size_t parts, std::size_t element_size,
                            std::size_t max_segment_bytes, std::uint32_t first_segment,
                            Clock::time_point deadline);

// Recursive-doubling allreduce (see allreduce_recursive_doubling.cpp): afterwards every
// rank's `data` holds the sum (or, with `average`, the mean), bit-identical on all ranks.
// Sends may still be pending: the caller waits for them.
result<void> recursive_doubling_allreduce(Communicator& comm, Envelope envelope,
                                          std::span<float> data, bool average,
                                          std::size_t max_segment_bytes,
                                          Clock::time_point deadline);

// Recursive halving and doubling (Rabenseifner; allreduce_halving_doubling.cpp): as
// recursive_doubling_allreduce, with the ring's bytes in 2 log2(p) steps.
result<void> halving_doubling_allreduce(Communicator& comm, Envelope envelope,
                                        std::span<float> data, bool average,
                                        std::size_t max_segment_bytes, Clock::time_point deadline);

}  // namespace fedcore::collective::detail
