// Collective operations over a Communicator: free functions over an options struct, in
// the shape of gloo's `allreduce(const AllreduceOptions&)`.
//
// Every operation:
//   - must be called by every rank of the group, in the same order, with matching sizes
//     (send/recv: by the two ranks named). A rank that calls a different operation, with
//     a different size, or from another job, is detected from the envelope of the first
//     message it receives or sends, and the operation fails on every rank with
//     errc::aborted (desync) or errc::unavailable (a peer aborted) — never a hang and
//     never wrong data;
//   - has a deadline: `timeout` (0 = the communicator's default) from the call. A silent
//     or dead peer makes it fail with errc::deadline_exceeded or errc::unavailable;
//   - after a failure, the communicator is dead (communicator.hpp) and the buffers hold
//     unspecified values.
// `max_segment_bytes` caps one message's payload: large buffers move as many segments
// so that receiving, reducing and sending overlap. Tests set it small to reach the
// multi-segment paths with few elements.
//
// Data layout for reduce_scatter and allreduce: n elements are split into size() chunks
// by chunk_range (the first n % size chunks are one element longer).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "shared/collective/communicator.hpp"

namespace fedcore::collective {

enum class ReduceOp { sum, average };

inline constexpr std::size_t kDefaultMaxSegmentBytes = std::size_t{1} << 20;

struct Range {
  std::size_t begin = 0;
  std::size_t size = 0;
};
// Chunk `index` of `n` elements split into `parts` nearly equal chunks.
// REQUIRES: parts > 0, index < parts.
Range chunk_range(std::size_t n, std::size_t parts, std::size_t index) noexcept;

// How an allreduce moves its data (all three are bit-identical on every rank; they add
// in different orders, so their results may differ from each other in the last bits).
//   ring: reduce-scatter, then allgather; each rank sends and receives 2 (size-1)/size of
//     the buffer in 2 (size-1) steps. Bandwidth-optimal, any group size.
//   recursive_doubling: log2(size) steps (+2 when size is not a power of two), each
//     sending the whole buffer. Latency-optimal: the choice for small buffers.
//   halving_doubling: Rabenseifner's reduce-scatter by recursive halving and allgather by
//     recursive doubling: the ring's bytes in 2 log2(size) steps (+2 when size is not a
//     power of two, each sending the whole buffer).
//   automatic: recursive doubling up to kRecursiveDoublingMaxBytes (per rank's buffer;
//     kRecursiveDoublingMaxBytesBeyondTwo in a power-of-two group larger than 2); above,
//     halving-doubling up to kHalvingDoublingMaxBytes when the group is a power of
//     two larger than 2, else the ring; but for 2 ranks that share memory, recursive
//     doubling in segments of max_segment_bytes while one takes at most half the smaller
//     ring (Transport::shared_memory_link_bytes). Every rank decides from the same size,
//     group and rings, so all take the same path.
enum class AllreduceAlgorithm { automatic, ring, recursive_doubling, halving_doubling };
// Measured on 2 and 4 ranks over loopback TCP and shared memory (docs/results.md,
// "Allreduce bus bandwidth"). Up to 256 KiB the saved message latencies outweigh the
// extra bytes recursive doubling sends. On 4 ranks halving-doubling beat the ring by
// 1.05-2.5x from 256 KiB to 4 MiB; at 16 MiB by 1.6x through shared memory but 0.93x over
// sockets, and at 64 MiB it lost on both (0.8-0.9x).
// For 2 ranks both send the same bytes, the whole buffer each, but recursive doubling in
// one exchange where the ring takes two (reduce-scatter, then allgather), each waiting for
// the other rank's copy. Over sockets that one exchange is slower from 1 MiB (its receive
// adds into the buffer it sends, so it waits for its own sends to drain); through shared
// memory, where a send is done once it is copied into the ring, it was 1.1-1.3x the ring
// at 1-4 MiB sent whole, and in 1 MiB segments, each released once added, 2-2.7x the ring
// at 4-64 MiB.
// With 4 ranks recursive doubling sends 2x the buffer in 2 steps where halving-doubling
// sends 1.5x in 4: the two cross near 64 KiB (4 ranks on loopback TCP and on shared memory,
// 2026-11-29: at 128 KiB halving-doubling was 1.5x faster over TCP and 1.1x through shared
// memory, at 32 KiB 0.8-0.9x).
inline constexpr std::size_t kRecursiveDoublingMaxBytes = std::size_t{256} << 10;
inline constexpr std::size_t kRecursiveDoublingMaxBytesBeyondTwo = std::size_t{64} << 10;
inline constexpr std::size_t kHalvingDoublingMaxBytes = std::size_t{16} << 20;

// In-place allreduce: afterwards every rank's `data` holds the element-wise sum (or mean)
// over all ranks, bit-identical on all ranks (the bits may differ between algorithms:
// they add in different orders).
struct AllreduceOptions {
  std::span<float> data;
  ReduceOp op = ReduceOp::sum;
  std::chrono::milliseconds timeout{0};
  std::size_t max_segment_bytes = kDefaultMaxSegmentBytes;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::automatic;
};
result<void> allreduce(Communicator& comm, const AllreduceOptions& options);

// Reduce-scatter: afterwards rank r's chunk chunk_range(data.size(), size, r) of `data`
// holds the sum (or mean) of that chunk over all ranks; the rest of `data` is scratch.
// Returns the span of that chunk inside `data`.
struct ReduceScatterOptions {
  std::span<float> data;
  ReduceOp op = ReduceOp::sum;
  std::chrono::milliseconds timeout{0};
  std::size_t max_segment_bytes = kDefaultMaxSegmentBytes;
};
result<std::span<float>> reduce_scatter(Communicator& comm, const ReduceScatterOptions& options);

// Broadcast from `root`: afterwards every rank's `data` equals the root's. Pipelined
// along the ring starting at root; the root returns once the last rank acknowledged.
struct BroadcastOptions {
  std::span<std::byte> data;
  int root = 0;
  std::chrono::milliseconds timeout{0};
  std::size_t max_segment_bytes = kDefaultMaxSegmentBytes;
};
result<void> broadcast(Communicator& comm, const BroadcastOptions& options);

// Allgather: `output` (size() × input.size() bytes) receives every rank's `input`, rank
// i's at offset i × input.size(). REQUIRES: output.size() == size() * input.size().
struct AllgatherOptions {
  std::span<const std::byte> input;
  std::span<std::byte> output;
  std::chrono::milliseconds timeout{0};
  std::size_t max_segment_bytes = kDefaultMaxSegmentBytes;
};
result<void> allgather(Communicator& comm, const AllgatherOptions& options);

// Barrier: returns once every rank has entered it (dissemination algorithm,
// ceil(log2 size) rounds).
struct BarrierOptions {
  std::chrono::milliseconds timeout{0};
};
result<void> barrier(Communicator& comm, const BarrierOptions& options = {});

// Tagged point-to-point messages (pipeline stages, parameter server). Messages between two ranks
// arrive in order; the receiver names the tag and size it expects, and a different one is a desync
// (errc::aborted). REQUIRES: peer != rank, 0 <= peer < size.
struct SendOptions {
  int peer = 0;
  std::uint32_t tag = 0;
  std::span<const std::byte> data;
  std::chrono::milliseconds timeout{0};
};
result<void> send(Communicator& comm, const SendOptions& options);

struct RecvOptions {
  int peer = 0;
  std::uint32_t tag = 0;
  std::span<std::byte> data;  // exactly the expected message size
  std::chrono::milliseconds timeout{0};
};
result<void> recv(Communicator& comm, const RecvOptions& options);

// Waits until one of `peers` has sent a message that recv can take without waiting, and
// returns that peer without receiving anything; for a rank that serves several peers in
// the order their messages arrive (the parameter server, distributed/param_server.hpp). Which
// peer, when several are ready: Transport::wait_any (arrival order, or round robin under
// MPI). A peer whose link failed is returned too, so that the recv from it reports the
// failure. Unlike every other operation, running out of time is not a failure: the result
// is std::nullopt and the communicator stays usable, so the caller can tell which peer is
// late. Errors: aborted (failed earlier), unavailable (a posted send failed).
// REQUIRES: peers non-empty, each in range and != rank.
struct ProbeAnyOptions {
  std::span<const int> peers;
  std::chrono::milliseconds timeout{0};
};
result<std::optional<int>> probe_any(Communicator& comm, const ProbeAnyOptions& options);

}  // namespace fedcore::collective
