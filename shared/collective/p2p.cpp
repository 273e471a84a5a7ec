#include <cstring>

#include "shared/collective/collectives.hpp"
#include "shared/collective/detail/ops.hpp"
#include "shared/util/assert.hpp"

namespace fedcore::collective {

result<void> send(Communicator& comm, const SendOptions& options) {
  FEDCORE_ASSERT(options.peer >= 0 && options.peer < comm.size() && options.peer != comm.rank(),
                 "send peer out of range");
  if (comm.failure())
    return fail(errc::aborted, "communicator failed earlier: " + comm.failure()->message);
  detail::CommTimer timer(comm);
  const auto deadline = comm.deadline(options.timeout);
  comm.transport().post_send(
      options.peer, comm.next_send(options.peer, options.tag, options.data.size()), options.data);
  if (auto sent = comm.transport().wait_sends(deadline); !sent)
    return comm.fail_with(sent.error());
  return {};
}

result<void> recv(Communicator& comm, const RecvOptions& options) {
  FEDCORE_ASSERT(options.peer >= 0 && options.peer < comm.size() && options.peer != comm.rank(),
                 "recv peer out of range");
  if (comm.failure())
    return fail(errc::aborted, "communicator failed earlier: " + comm.failure()->message);
  detail::CommTimer timer(comm);
  const auto deadline = comm.deadline(options.timeout);
  auto got = comm.transport().recv(
      options.peer, comm.next_recv(options.peer, options.tag, options.data.size()), deadline);
  if (!got)
    return comm.fail_with(got.error());
  if (!got->empty())
    std::memcpy(options.data.data(), got->data(), got->size());
  comm.transport().release(options.peer);
  return {};
}

result<std::optional<int>> probe_any(Communicator& comm, const ProbeAnyOptions& options) {
  FEDCORE_ASSERT(!options.peers.empty(), "probe_any needs peers");
  for (int peer : options.peers) {
    FEDCORE_ASSERT(peer >= 0 && peer < comm.size() && peer != comm.rank(),
                   "probe_any peer out of range");
  }
  if (comm.failure())
    return fail(errc::aborted, "communicator failed earlier: " + comm.failure()->message);
  detail::CommTimer timer(comm);
  auto ready = comm.transport().wait_any(options.peers, comm.deadline(options.timeout));
  if (!ready)
    return comm.fail_with(ready.error());
  return *ready;
}

}  // namespace fedcore::collective
