#include <algorithm>
#include <cstring>

#include "shared/collective/collectives.hpp"
#include "shared/collective/detail/ops.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::collective {

Range chunk_range(std::size_t n, std::size_t parts, std::size_t index) noexcept {
  const std::size_t base = n / parts;
  const std::size_t extra = n % parts;
  return {index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

namespace detail {

std::size_t segment_count(std::size_t max_chunk_elements, std::size_t element_size,
                          std::size_t max_segment_bytes) noexcept {
  const std::size_t per_segment = std::max<std::size_t>(1, max_segment_bytes / element_size);
  return std::max<std::size_t>(1, (max_chunk_elements + per_segment - 1) / per_segment);
}

namespace {

std::size_t wrap(long long i, int p) noexcept {
  return static_cast<std::size_t>(((i % p) + p) % p);
}

// The j-th of `count` nearly equal segments of chunk `c` (element ranges).
Range segment_of(Range c, std::size_t count, std::size_t j) noexcept {
  const Range s = chunk_range(c.size, count, j);
  return {c.begin + s.begin, s.size};
}

}  // namespace

// The ring algorithm, for p ranks in a ring (rank r sends to r+1 and receives from r-1)
// and a buffer of n elements cut into p chunks:
//
// Reduce-scatter. In step s = 0 .. p-2, rank r sends chunk r-s-1 to its right neighbour
// and receives chunk r-s-2 from its left one, adding it into its own copy. The chunk a
// rank sends in step s is the one it received and added to in step s-1, so it already
// carries the sum over s+1 ranks; after p-1 steps chunk r on rank r holds the sum over
// all p ranks. Each rank sent (p-1)/p of the buffer.
//
// Allgather. In step s = 0 .. p-2, rank r sends chunk r-s (its reduced chunk first) and
// receives chunk r-s-1, which it copies over its own; after p-1 steps every rank holds
// every reduced chunk, bit-identical because each was computed once, by its owner.
//
// Chunking and pipelining. Every chunk is cut into the same number of segments of at
// most max_segment_bytes, each its own message. A step posts all its sends at once and
// then receives segment after segment, reducing each one while later segments are still
// on the wire; the next step's sends are posted as soon as their data is final, without
// waiting for this step's sends to drain (nothing that is still being sent is written
// again: a chunk is only received into after it was sent). Sends are awaited once, at the
// end of the operation.
result<void> ring_reduce_scatter(Communicator& comm, Envelope envelope, std::span<float> data,
                                 bool average, std::size_t max_segment_bytes,
                                 Clock::time_point deadline) {
  Transport& t = comm.transport();
  const int p = comm.size();
  const int r = comm.rank();
  const int right = (r + 1) % p;
  const int left = (r + p - 1) % p;
  const std::size_t n = data.size();
  const std::size_t segments =
      segment_count(chunk_range(n, p, 0).size, sizeof(float), max_segment_bytes);
  for (int s = 0; s + 1 < p; ++s) {
    const Range send_chunk = chunk_range(n, p, wrap(r - s - 1, p));
    const Range recv_chunk = chunk_range(n, p, wrap(r - s - 2, p));
    for (std::size_t j = 0; j < segments; ++j) {
      const Range seg = segment_of(send_chunk, segments, j);
      envelope.segment = static_cast<std::uint32_t>(s * segments + j);
      envelope.length = seg.size * sizeof(float);
      t.post_send(right, envelope, bytes_of(data.subspan(seg.begin, seg.size)));
    }
    for (std::size_t j = 0; j < segments; ++j) {
      const Range seg = segment_of(recv_chunk, segments, j);
      envelope.segment = static_cast<std::uint32_t>(s * segments + j);
      envelope.length = seg.size * sizeof(float);
      auto got = t.recv(left, envelope, deadline);
      if (!got)
        return got.error();
      add_received(data.subspan(seg.begin, seg.size), *got);
      t.release(left);
    }
  }
  if (average && p > 1) {
    const Range mine = chunk_range(n, p, r);
    const float divisor = static_cast<float>(p);
    for (float& x : data.subspan(mine.begin, mine.size))
      x /= divisor;
  }
  return {};
}

result<void> ring_allgather(Communicator& comm, Envelope envelope, std::span<std::byte> data,
                            std::size_t parts, std::size_t element_size,
                            std::size_t max_segment_bytes, std::uint32_t first_segment,
                            Clock::time_point deadline) {
  Transport& t = comm.transport();
  const int p = comm.size();
  const int r = comm.rank();
  const int right = (r + 1) % p;
  const int left = (r + p - 1) % p;
  const std::size_t n = data.size() / element_size;
  const std::size_t segments =
      segment_count(chunk_range(n, parts, 0).size, element_size, max_segment_bytes);
  for (int s = 0; s + 1 < p; ++s) {
    const Range send_chunk = chunk_range(n, parts, wrap(r - s, p));
    const Range recv_chunk = chunk_range(n, parts, wrap(r - s - 1, p));
    for (std::size_t j = 0; j < segments; ++j) {
      const Range seg = segment_of(send_chunk, segments, j);
      envelope.segment = first_segment + static_cast<std::uint32_t>(s * segments + j);
      envelope.length = seg.size * element_size;
      t.post_send(right, envelope, data.subspan(seg.begin * element_size, seg.size * element_size));
    }
    for (std::size_t j = 0; j < segments; ++j) {
      const Range seg = segment_of(recv_chunk, segments, j);
      envelope.segment = first_segment + static_cast<std::uint32_t>(s * segments + j);
      envelope.length = seg.size * element_size;
      auto got = t.recv(left, envelope, deadline);
      if (!got)
        return got.error();
      if (!got->empty())
        std::memcpy(data.data() + seg.begin * element_size, got->data(), got->size());
      t.release(left);
    }
  }
  return {};
}

}  // namespace detail

namespace {

struct Plan {
  AllreduceAlgorithm algorithm;
  std::size_t max_segment_bytes;
};

// The algorithm `options` asks for, with `automatic` resolved for this group, and the
// segment size to run it with.
Plan choose(const AllreduceOptions& options, const Communicator& comm) noexcept {
  const std::size_t segment = options.max_segment_bytes;
  if (options.algorithm != AllreduceAlgorithm::automatic)
    return {options.algorithm, segment};
  const int p = comm.size();
  const std::size_t bytes = options.data.size_bytes();
  const bool power_of_two = (p & (p - 1)) == 0;
  const std::size_t latency_bound =
      p > 2 && power_of_two ? kRecursiveDoublingMaxBytesBeyondTwo : kRecursiveDoublingMaxBytes;
  if (bytes <= latency_bound)
    return {AllreduceAlgorithm::recursive_doubling, segment};
  // Two ranks that share memory swap segments through their rings: one exchange per
  // segment, where the ring needs two that wait on each other (reduce-scatter, then
  // allgather). Half the ring: room for a segment even behind one not yet released. In
  // segments (1 MiB by default), not whole: each is released as soon as it is added, so
  // the next goes to the same place in the ring and the caches (shm_ring.hpp); 2 ranks,
  // 4 MiB: 12.4-16.4 GB/s in 1 MiB segments, 7.2-9.6 whole (docs/results.md).
  const std::size_t link = p == 2 ? comm.transport().shared_memory_link_bytes(1 - comm.rank()) : 0;
  if (2 * std::min(segment, bytes) <= link)
    return {AllreduceAlgorithm::recursive_doubling, segment};
  // With 2 ranks halving-doubling is the ring; with a fold it sends more than the ring.
  if (p > 2 && power_of_two && bytes <= kHalvingDoublingMaxBytes)
    return {AllreduceAlgorithm::halving_doubling, segment};
  return {AllreduceAlgorithm::ring, segment};
}

}  // namespace

result<void> allreduce(Communicator& comm, const AllreduceOptions& options) {
  FEDCORE_ASSERT(options.max_segment_bytes >= sizeof(float), "segment too small");
  auto envelope = comm.begin(OpType::allreduce, options.data.size_bytes());
  if (!envelope)
    return envelope.error();
  detail::CommTimer timer(comm);
  const auto deadline = comm.deadline(options.timeout);
  const int p = comm.size();
  if (p == 1)
    return {};
  const bool average = options.op == ReduceOp::average;
  const Plan plan = choose(options, comm);
  if (plan.algorithm != AllreduceAlgorithm::ring) {
    auto run = plan.algorithm == AllreduceAlgorithm::recursive_doubling
                   ? detail::recursive_doubling_allreduce
                   : detail::halving_doubling_allreduce;
    auto done = run(comm, *envelope, options.data, average, plan.max_segment_bytes, deadline);
    if (!done)
      return comm.fail_with(done.error());
    if (auto sent = comm.transport().wait_sends(deadline); !sent)
      return comm.fail_with(sent.error());
    return {};
  }
  auto rs = detail::ring_reduce_scatter(comm, *envelope, options.data, average,
                                        options.max_segment_bytes, deadline);
  if (!rs)
    return comm.fail_with(rs.error());
  const std::size_t segments = detail::segment_count(chunk_range(options.data.size(), p, 0).size,
                                                     sizeof(float), options.max_segment_bytes);
  auto ag = detail::ring_allgather(comm, *envelope, std::as_writable_bytes(options.data), p,
                                   sizeof(float), options.max_segment_bytes,
                                   static_cast<std::uint32_t>((p - 1) * segments), deadline);
  if (!ag)
    return comm.fail_with(ag.error());
  if (auto sent = comm.transport().wait_sends(deadline); !sent)
    return comm.fail_with(sent.error());
  return {};
}

result<std::span<float>> reduce_scatter(Communicator& comm, const ReduceScatterOptions& options) {
  FEDCORE_ASSERT(options.max_segment_bytes >= sizeof(float), "segment too small");
  auto envelope = comm.begin(OpType::reduce_scatter, options.data.size_bytes());
  if (!envelope)
    return envelope.error();
  detail::CommTimer timer(comm);
  const auto deadline = comm.deadline(options.timeout);
  const Range mine = chunk_range(options.data.size(), comm.size(), comm.rank());
  if (comm.size() > 1) {
    auto rs =
        detail::ring_reduce_scatter(comm, *envelope, options.data, options.op == ReduceOp::average,
                                    options.max_segment_bytes, deadline);
    if (!rs)
      return comm.fail_with(rs.error());
    if (auto sent = comm.transport().wait_sends(deadline); !sent)
      return comm.fail_with(sent.error());
  }
  return options.data.subspan(mine.begin, mine.size);
}

}  // namespace fedcore::collective
