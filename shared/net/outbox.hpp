// Outbox: the one writer of a FrameChannel.
//
// Several coroutines of a session may want to send (the run loop pushes a model, the
// session answers an error, a timer sends heartbeats); a channel allows one write in
// flight. `send` queues a frame and returns at once; a single drain coroutine writes
// queued frames in order. Payloads are shared, read-only buffers, so one global model
// can be queued to every client of a round without a copy per client.
//
// When a write fails the outbox closes the channel (the session's reader then sees the
// error and ends the session) and drops what is queued. `queued_bytes()` lets callers
// apply backpressure. A frame may carry a `written` callback, called on the io thread
// once the whole frame has been handed to the stream (never for a frame that failed or
// was dropped); the server times its rounds with it.
//
// Thread safety: like its channel, an outbox belongs to one strand / single-threaded
// io_context. It shares ownership of the channel, so a write still in flight when the
// session ends completes (or fails) on a live channel.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shared/net/frame_channel.hpp"

namespace fedcore::net {

using SharedPayload = std::shared_ptr<const std::vector<float>>;
using WrittenCallback = std::function<void()>;

template <class Stream>
class Outbox {
 public:
  explicit Outbox(std::shared_ptr<FrameChannel<Stream>> channel);
  ~Outbox();
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  void send(protocol::MessageType type, std::string metadata, SharedPayload payload = nullptr,
            WrittenCallback written = {});
  std::size_t queued_frames() const noexcept;
  std::uint64_t queued_bytes() const noexcept;
  // The first write error, if any ("" while healthy).
  const std::string& failure() const noexcept;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

extern template class Outbox<TcpStream>;
extern template class Outbox<TlsStream>;
extern template class Outbox<LocalStream>;

}  // namespace fedcore::net
