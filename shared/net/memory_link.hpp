// MemoryLink: a connected pair of Links inside one process that pass whole frames through
// memory — fedcore-sim's in-process sites (`--transport inproc`).
//
// Why not a socket pair: every site would hold two file descriptors, and 10,000 sites with
// the server's own files pass a typical hard limit of 20,000; each frame would also cross
// the kernel twice. A memory link holds no descriptor: a frame is moved into the peer's
// queue and the peer's reader is woken on its own executor.
//
// What holds as on a FrameChannel (shared/net/frame_channel.hpp):
//   - frames arrive whole and in order; a frame above `limits` or refused by the admission
//     policy fails the read with resource_exhausted and closes the link;
//   - a read waits at most the idle timeout, then fails with deadline_exceeded and closes;
//   - after either end closes, the peer's reader gets unavailable once the frames already
//     queued are read ("the peer closed the connection between frames");
//   - `written` runs on the sender's executor after the frame is queued for the peer,
//     never for a frame dropped because the link was closed.
// What does not: there is no payload gate (the payload already exists in the sender's
// memory, so admitting it costs nothing more) and no transfer deadline (nothing arrives in
// pieces). A sender is not held back by a slow reader; the simulator's sites send one
// update per round, so the queue is bounded by the protocol, not here.
//
// Thread safety: each end belongs to its executor, which must be single-threaded (an
// io_context run by one thread, or a strand); the two ends may be on different threads.
#pragma once

#include <memory>
#include <utility>

#include <boost/asio/any_io_executor.hpp>

#include "shared/net/link.hpp"

namespace fedcore::net {

struct MemoryLinkPair {
  std::unique_ptr<Link> first;
  std::unique_ptr<Link> second;
};

// Two connected ends: `first` runs on `first_executor`, `second` on `second_executor`.
// Both start with `options`' limits and timeouts (each end may change its own later).
MemoryLinkPair make_memory_link(boost::asio::any_io_executor first_executor,
                                boost::asio::any_io_executor second_executor,
                                const ChannelOptions& options = {});

}  // namespace fedcore::net
