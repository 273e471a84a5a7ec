#include <cstring>

#include "shared/collective/collectives.hpp"
#include "shared/collective/detail/ops.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::collective {

// The allgather half of the ring allreduce (allreduce.cpp) over byte blocks: every rank
// contributes block `rank` and forwards the block it received in the previous step.
result<void> allgather(Communicator& comm, const AllgatherOptions& options) {
  const int p = comm.size();
  FEDCORE_ASSERT(options.output.size() == options.input.size() * p,
                 "allgather output must hold size() inputs");
  FEDCORE_ASSERT(options.max_segment_bytes > 0, "segment too small");
  auto envelope = comm.begin(OpType::allgather, options.input.size());
  if (!envelope)
    return envelope.error();
  detail::CommTimer timer(comm);
  const auto deadline = comm.deadline(options.timeout);
  const std::size_t block = options.input.size();
  if (block > 0)
    std::memcpy(options.output.data() + comm.rank() * block, options.input.data(), block);
  if (p == 1)
    return {};
  // Blocks are equal, so chunk_range over size() parts of the output gives them exactly.
  auto ag = detail::ring_allgather(comm, *envelope, options.output, p, 1, options.max_segment_bytes,
                                   0, deadline);
  if (!ag)
    return comm.fail_with(ag.error());
  if (auto sent = comm.transport().wait_sends(deadline); !sent)
    return comm.fail_with(sent.error());
  return {};
}

}  // namespace fedcore::collective
