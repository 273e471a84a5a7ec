// Link: one framed connection as the federation's session code sees it, whatever carries
// it — mutual TLS between a client and the server, or a local socket pair inside
// fedcore-sim. Reads go straight to the FrameChannel; writes are queued behind the link's
// one writer (shared/net/outbox.hpp), so any coroutine of the session may send.
//
// Thread safety: a Link belongs to the io_context thread of its session.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "shared/net/frame_channel.hpp"
#include "shared/net/outbox.hpp"
#include "shared/protocol/frame.hpp"

namespace fedcore::net {

class Link {
 public:
  virtual ~Link() = default;
  // Reads the next frame; `spare` (optional): memory the caller is done with, typically the
  // payload of the frame before, to receive this one's payload into (FrameChannel::read_frame).
  virtual boost::asio::awaitable<result<protocol::Frame>> read_frame(
      std::vector<std::byte> spare = {}) = 0;
  // What frames may carry from now on (shared/net/frame_channel.hpp, Admission).
  virtual void set_admission(AdmissionPolicy policy) = 0;
  // The channel's idle and transfer deadlines (shared/net/frame_channel.hpp).
  virtual void set_timeouts(std::chrono::milliseconds idle,
                            std::chrono::milliseconds transfer) noexcept = 0;
  // Queues a frame; `written` (optional) runs once it is written (shared/net/outbox.hpp).
  virtual void send(protocol::MessageType type, std::string metadata,
                    SharedPayload payload = nullptr, WrittenCallback written = {}) = 0;
  virtual void close() noexcept = 0;
  virtual bool is_open() const noexcept = 0;
  virtual std::uint64_t bytes_read() const noexcept = 0;
  virtual std::uint64_t bytes_written() const noexcept = 0;
};

// The Link over one stream type (TlsStream, LocalStream, a TCP socket).
template <class Stream>
class StreamLink final : public Link {
 public:
  StreamLink(Stream stream, const ChannelOptions& options)
      : channel_(std::make_shared<FrameChannel<Stream>>(std::move(stream), options)),
        outbox_(channel_) {}
  boost::asio::awaitable<result<protocol::Frame>> read_frame(
      std::vector<std::byte> spare) override {
    return channel_->read_frame(std::move(spare));
  }
  void set_admission(AdmissionPolicy policy) override {
    channel_->set_admission(std::move(policy));
  }
  void set_timeouts(std::chrono::milliseconds idle,
                    std::chrono::milliseconds transfer) noexcept override {
    channel_->set_timeouts(idle, transfer);
  }
  void send(protocol::MessageType type, std::string metadata, SharedPayload payload,
            WrittenCallback written) override {
    outbox_.send(type, std::move(metadata), std::move(payload), std::move(written));
  }
  void close() noexcept override { channel_->close(); }
  bool is_open() const noexcept override { return channel_->is_open(); }
  std::uint64_t bytes_read() const noexcept override { return channel_->bytes_read(); }
  std::uint64_t bytes_written() const noexcept override { return channel_->bytes_written(); }

 private:
  std::shared_ptr<FrameChannel<Stream>> channel_;
  Outbox<Stream> outbox_;
};

}  // namespace fedcore::net
