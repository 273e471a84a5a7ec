#include "shared/net/outbox.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

namespace fedcore::net {
namespace asio = boost::asio;

namespace {
struct Queued {
  protocol::MessageType type;
  std::string metadata;
  SharedPayload payload;
  WrittenCallback written;
};
}  // namespace

// The drain coroutine holds a shared_ptr to the state, so destroying the Outbox while a
// write is in flight leaves the coroutine valid; `alive` tells it to stop afterwards.
template <class Stream>
struct Outbox<Stream>::State {
  explicit State(std::shared_ptr<FrameChannel<Stream>> c) : channel(std::move(c)) {}
  std::shared_ptr<FrameChannel<Stream>> channel;
  std::deque<Queued> queue;
  std::uint64_t bytes = 0;
  bool draining = false;
  bool alive = true;
  std::string failure;
};

template <class Stream>
Outbox<Stream>::Outbox(std::shared_ptr<FrameChannel<Stream>> channel)
    : state_(std::make_shared<State>(std::move(channel))) {}

template <class Stream>
Outbox<Stream>::~Outbox() {
  state_->alive = false;
  state_->queue.clear();
}

template <class Stream>
void Outbox<Stream>::send(protocol::MessageType type, std::string metadata, SharedPayload payload,
                          WrittenCallback written) {
  auto& s = *state_;
  if (!s.failure.empty()) {
    return;
  }
  s.bytes += metadata.size() + (payload ? payload->size() * sizeof(float) : 0);
  s.queue.push_back({type, std::move(metadata), std::move(payload), std::move(written)});
  if (s.draining) {
    return;
  }
  s.draining = true;
  auto executor = s.channel->stream().get_executor();
  asio::co_spawn(
      executor,
      [state = state_]() -> asio::awaitable<void> {
        while (state->alive && !state->queue.empty()) {
          Queued next = std::move(state->queue.front());
          state->queue.pop_front();
          const std::span<const std::byte> bytes =
              next.payload ? std::as_bytes(std::span<const float>(*next.payload))
                           : std::span<const std::byte>();
          auto written = co_await state->channel->write_frame(next.type, next.metadata, bytes);
          state->bytes -= next.metadata.size() + bytes.size();
          if (!written && state->alive) {
            state->failure = written.error().message;
            state->queue.clear();
            state->bytes = 0;
            state->channel->close();
          } else if (written && next.written) {
            next.written();
          }
        }
        state->draining = false;
      },
      asio::detached);
}

template <class Stream>
std::size_t Outbox<Stream>::queued_frames() const noexcept {
  return state_->queue.size();
}

template <class Stream>
std::uint64_t Outbox<Stream>::queued_bytes() const noexcept {
  return state_->bytes;
}

template <class Stream>
const std::string& Outbox<Stream>::failure() const noexcept {
  return state_->failure;
}

template class Outbox<TcpStream>;
template class Outbox<TlsStream>;
template class Outbox<LocalStream>;

}  // namespace fedcore::net
