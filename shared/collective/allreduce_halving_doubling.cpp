#include <vector>

#include "shared/collective/collectives.hpp"
#include "shared/collective/detail/exchange.hpp"
#include "shared/collective/detail/ops.hpp"

namespace fedcore::collective::detail {

// Recursive halving and doubling (Rabenseifner's algorithm; Thakur, Rabenseifner and
// Gropp 2005), with the same fold as recursive doubling for a group that is not a power
// of two (q = the largest power of two <= p):
//   1. fold: extra rank q + i sends its data to rank i, which adds it;
//   2. reduce-scatter by recursive halving: for d = q/2, q/4, .., 1, rank r and r XOR d
//      split the part they are responsible for in two; the rank without bit d keeps the
//      lower half, the other the upper one; each sends the half it gives up and adds the
//      partner's copy of the half it keeps. Afterwards rank r holds the sum of 1/q of the
//      buffer;
//   3. allgather by recursive doubling, the same pairs in reverse order: each sends the
//      part it holds and receives its partner's, until every rank holds everything;
//   4. unfold: rank i sends the result to extra rank q + i.
// Every element's sum is computed once, by the rank that ends step 2 holding it, and only
// copied after that: bit-identical on all ranks. The ring's bytes (each rank sends
// 2 (q-1)/q of the buffer) in 2 log2(q) steps instead of 2 (q-1): for 4 ranks, 4 steps
// instead of 6, which matters at mid sizes where a step's latency is still a good part of
// its time.
result<void> halving_doubling_allreduce(Communicator& comm, Envelope envelope,
                                        std::span<float> data, bool average,
                                        std::size_t max_segment_bytes, Clock::time_point deadline) {
  const int p = comm.size();
  const int r = comm.rank();
  const int q = power_of_two_floor(p);
  const int extras = p - q;
  const std::uint32_t halvings = log2_of(q);
  Exchange exchange(comm, std::move(envelope), data.size(), max_segment_bytes, deadline);
  const std::uint32_t unfold_step = 2 * halvings + 1;
  if (r >= q) {  // an extra rank: hand the data over, get the result back
    exchange.send(r - q, 0, data);
    return exchange.receive(r - q, unfold_step, data, Exchange::Merge::copy, Exchange::Sends::wait);
  }
  if (r < extras) {
    if (auto ok = exchange.receive(r + q, 0, data, Exchange::Merge::add, Exchange::Sends::wait);
        !ok)
      return ok;
  }
  // The part this rank is responsible for, before each halving (for the allgather).
  std::vector<Range> parts;
  parts.reserve(halvings);
  Range mine{0, data.size()};
  std::uint32_t step = 0;
  for (int d = q / 2; d >= 1; d /= 2) {
    ++step;
    const int partner = r ^ d;
    parts.push_back(mine);
    const Range lower = chunk_range(mine.size, 2, 0);
    const Range upper = chunk_range(mine.size, 2, 1);
    const bool keeps_lower = (r & d) == 0;
    const Range keep{mine.begin + (keeps_lower ? lower.begin : upper.begin),
                     keeps_lower ? lower.size : upper.size};
    const Range give{mine.begin + (keeps_lower ? upper.begin : lower.begin),
                     keeps_lower ? upper.size : lower.size};
    exchange.send(partner, step, data.subspan(give.begin, give.size));
    // The half being sent is not the one written: no need to wait for the sends.
    if (auto ok = exchange.receive(partner, step, data.subspan(keep.begin, keep.size),
                                   Exchange::Merge::add, Exchange::Sends::no_wait);
        !ok)
      return ok;
    mine = keep;
  }
  if (average && p > 1) {
    const float divisor = static_cast<float>(p);
    for (float& x : data.subspan(mine.begin, mine.size))
      x /= divisor;
  }
  for (int d = 1; d < q; d *= 2) {
    ++step;
    const int partner = r ^ d;
    const Range whole = parts.back();
    parts.pop_back();
    // The partner holds the rest of `whole`: the half this rank gave up at this level.
    const Range theirs = mine.begin == whole.begin
                             ? Range{mine.begin + mine.size, whole.size - mine.size}
                             : Range{whole.begin, whole.size - mine.size};
    exchange.send(partner, step, data.subspan(mine.begin, mine.size));
    // That half was sent during the reduce-scatter: wait before overwriting it.
    if (auto ok = exchange.receive(partner, step, data.subspan(theirs.begin, theirs.size),
                                   Exchange::Merge::copy, Exchange::Sends::wait);
        !ok)
      return ok;
    mine = whole;
  }
  if (r < extras)
    exchange.send(r + q, unfold_step, data);
  return {};
}

}  // namespace fedcore::collective::detail
