#include "shared/collective/collectives.hpp"
#include "shared/collective/detail/ops.hpp"

namespace fedcore::collective {

// Dissemination barrier: in round k (distance d = 2^k) rank r signals r+d and waits for
// r-d. After ceil(log2 p) rounds every rank has heard, directly or through others, from
// every rank, so none leaves before all have entered.
result<void> barrier(Communicator& comm, const BarrierOptions& options) {
  auto envelope = comm.begin(OpType::barrier, 0);
  if (!envelope)
    return envelope.error();
  const int p = comm.size();
  if (p == 1)
    return {};
  detail::CommTimer timer(comm);
  const auto deadline = comm.deadline(options.timeout);
  Transport& t = comm.transport();
  const int r = comm.rank();
  std::uint32_t round = 0;
  for (int d = 1; d < p; d *= 2, ++round) {
    envelope->segment = round;
    envelope->length = 0;
    t.post_send((r + d) % p, *envelope, {});
    auto got = t.recv((r - d + p) % p, *envelope, deadline);
    if (!got)
      return comm.fail_with(got.error());
  }
  if (auto sent = t.wait_sends(deadline); !sent)
    return comm.fail_with(sent.error());
  return {};
}

}  // namespace fedcore::collective
