#include "shared/collective/collectives.hpp"
#include "shared/collective/detail/exchange.hpp"
#include "shared/collective/detail/ops.hpp"

namespace fedcore::collective::detail {

// Recursive doubling (Thakur, Rabenseifner and Gropp 2005, "Optimization of Collective
// Communication Operations in MPICH"), with the usual fold for a group that is not a
// power of two. With q = the largest power of two <= p and e = p - q "extra" ranks:
//   1. fold: extra rank q + i sends its data to rank i, which adds it (i < e);
//   2. for d = 1, 2, 4, .. < q: rank r (< q) swaps its partial sum with rank r XOR d and
//      adds what it received;
//   3. unfold: rank i sends the result to extra rank q + i.
// After step 2 every rank below q holds the same bits: in each swap both partners compute
// a + b from the same two operands, and IEEE addition is commutative. So the allreduce
// is bit-identical on all ranks, as the ring's is.
// Cost: ceil(log2 p) (+2 when p is not a power of two) message latencies instead of the
// ring's 2 (p - 1), for log2(q) whole buffers sent instead of 2 (p - 1) / p of one: the
// right trade for small buffers, where a message's latency dwarfs its bytes.
result<void> recursive_doubling_allreduce(Communicator& comm, Envelope envelope,
                                          std::span<float> data, bool average,
                                          std::size_t max_segment_bytes,
                                          Clock::time_point deadline) {
  const int p = comm.size();
  const int r = comm.rank();
  const int q = power_of_two_floor(p);
  const int extras = p - q;
  Exchange exchange(comm, std::move(envelope), data.size(), max_segment_bytes, deadline);
  const std::uint32_t unfold_step = log2_of(q) + 1;
  std::uint32_t step = 0;
  if (r >= q) {  // an extra rank: hand the data over, get the result back
    exchange.send(r - q, step, data);
    return exchange.receive(r - q, unfold_step, data, Exchange::Merge::copy, Exchange::Sends::wait);
  }
  if (r < extras) {
    if (auto ok = exchange.receive(r + q, step, data, Exchange::Merge::add, Exchange::Sends::wait);
        !ok)
      return ok;
  }
  for (int d = 1; d < q; d *= 2) {
    ++step;
    const int partner = r ^ d;
    if (auto ok = exchange.swap_add(partner, step, data); !ok)
      return ok;
  }
  if (average && p > 1) {
    const float divisor = static_cast<float>(p);
    for (float& x : data)
      x /= divisor;
  }
  if (r < extras)
    exchange.send(r + q, unfold_step, data);
  return {};
}

}  // namespace fedcore::collective::detail
