#include <cstring>

#include "shared/collective/collectives.hpp"
#include "shared/collective/detail/ops.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::collective {

// Pipelined chain broadcast: the ranks form a chain along the ring, starting at the root.
// Each segment is forwarded to the next rank as soon as it arrives, so for a large buffer
// all links carry data at once and the time approaches one buffer transfer, not p-1.
// The last rank of the chain then sends an empty acknowledgement to the root: without
// it the root, which only sends, could not notice a rank that is out of step.
result<void> broadcast(Communicator& comm, const BroadcastOptions& options) {
  const int p = comm.size();
  FEDCORE_ASSERT(options.root >= 0 && options.root < p, "root out of range");
  FEDCORE_ASSERT(options.max_segment_bytes > 0, "segment too small");
  auto envelope = comm.begin(OpType::broadcast, options.data.size());
  if (!envelope)
    return envelope.error();
  if (p == 1)
    return {};
  detail::CommTimer timer(comm);
  const auto deadline = comm.deadline(options.timeout);
  Transport& t = comm.transport();
  const int r = comm.rank();
  const int position = (r - options.root + p) % p;
  const int next = (r + 1) % p;
  const int prev = (r + p - 1) % p;
  const std::size_t segments =
      detail::segment_count(options.data.size(), 1, options.max_segment_bytes);
  for (std::size_t j = 0; j < segments; ++j) {
    const Range seg = chunk_range(options.data.size(), segments, j);
    envelope->segment = static_cast<std::uint32_t>(j);
    envelope->length = seg.size;
    auto bytes = options.data.subspan(seg.begin, seg.size);
    if (position > 0) {
      auto got = t.recv(prev, *envelope, deadline);
      if (!got)
        return comm.fail_with(got.error());
      if (!got->empty())
        std::memcpy(bytes.data(), got->data(), got->size());
      t.release(prev);
    }
    if (position < p - 1)
      t.post_send(next, *envelope, bytes);
  }
  envelope->segment = static_cast<std::uint32_t>(segments);
  envelope->length = 0;
  if (position == p - 1)
    t.post_send(options.root, *envelope, {});
  if (position == 0) {
    auto ack = t.recv((options.root + p - 1) % p, *envelope, deadline);
    if (!ack)
      return comm.fail_with(ack.error());
  }
  if (auto sent = t.wait_sends(deadline); !sent)
    return comm.fail_with(sent.error());
  return {};
}

}  // namespace fedcore::collective
