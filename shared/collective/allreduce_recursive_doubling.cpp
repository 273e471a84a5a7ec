#include <cstring>

#include "shared/collective/collectives.hpp"
#include "shared/collective/detail/ops.hpp"

namespace fedcore::collective::detail {
namespace {

// Largest power of two <= p (p >= 1).
int power_of_two_floor(int p) noexcept {
  int q = 1;
  while (q * 2 <= p)
    q *= 2;
  return q;
}

// Messages of one step are numbered step * segments + j, so a rank that is a step ahead
// or behind is caught by its envelope like any other desync.
class Exchange {
 public:
  Exchange(Communicator& comm, Envelope envelope, std::size_t segments, Clock::time_point deadline)
      : t_(comm.transport()),
        envelope_(std::move(envelope)),
        segments_(segments),
        deadline_(deadline) {}

  void send(int peer, std::uint32_t step, std::span<const float> data) {
    for (std::size_t j = 0; j < segments_; ++j) {
      const Range seg = chunk_range(data.size(), segments_, j);
      stamp(step, j, seg.size);
      t_.post_send(peer, envelope_, bytes_of(data.subspan(seg.begin, seg.size)));
    }
  }

  // Receives `data.size()` floats from `peer` and adds them into `data` (add) or copies
  // them over it. Adding waits for this rank's posted sends first: they may still read
  // `data` (the transport sends from the caller's memory), and a small send is normally
  // handed to the kernel long before the peer's answer is here, so the wait is free.
  result<void> receive(int peer, std::uint32_t step, std::span<float> data, bool add) {
    for (std::size_t j = 0; j < segments_; ++j) {
      const Range seg = chunk_range(data.size(), segments_, j);
      stamp(step, j, seg.size);
      auto got = t_.recv(peer, envelope_, deadline_);
      if (!got)
        return got.error();
      if (auto sent = t_.wait_sends(deadline_); !sent)
        return sent.error();
      // Payload buffers are heap allocations or 64-byte aligned ring slots: float aligned.
      const float* in = reinterpret_cast<const float*>(got->data());
      float* out = data.data() + seg.begin;
      if (add) {
        for (std::size_t i = 0; i < seg.size; ++i)
          out[i] += in[i];
      } else if (seg.size > 0) {
        std::memcpy(out, in, seg.size * sizeof(float));
      }
    }
    return {};
  }

 private:
  void stamp(std::uint32_t step, std::size_t j, std::size_t elements) {
    envelope_.segment = static_cast<std::uint32_t>(step * segments_ + j);
    envelope_.length = elements * sizeof(float);
  }

  Transport& t_;
  Envelope envelope_;
  std::size_t segments_;
  Clock::time_point deadline_;
};

}  // namespace

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
  Exchange exchange(comm, std::move(envelope),
                    segment_count(data.size(), sizeof(float), max_segment_bytes), deadline);
  std::uint32_t doublings = 0;
  for (int d = 1; d < q; d *= 2)
    ++doublings;
  const std::uint32_t unfold_step = doublings + 1;
  std::uint32_t step = 0;
  if (r >= q) {  // an extra rank: hand the data over, get the result back
    exchange.send(r - q, step, data);
    return exchange.receive(r - q, unfold_step, data, /*add=*/false);
  }
  if (r < extras) {
    if (auto ok = exchange.receive(r + q, step, data, /*add=*/true); !ok)
      return ok;
  }
  for (int d = 1; d < q; d *= 2) {
    ++step;
    const int partner = r ^ d;
    exchange.send(partner, step, data);
    if (auto ok = exchange.receive(partner, step, data, /*add=*/true); !ok)
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
