// SessionRegistry: who is connected — one live session per client id.
//
// A Session is one authenticated connection after its HELLO: the client id (from the
// certificate, or vouched for by fedcore-sim for in-process clients), the peer address,
// the schema it declared and its Link. A second session under the same id replaces the
// first: add() returns the old one for the caller to close, and that old session's end
// no longer removes anything (remove() only removes the live session of its id).
//
// Thread safety: none; the server's io_context thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "federation/run_controller.hpp"
#include "net/frame_channel.hpp"
#include "net/outbox.hpp"
#include "protocol/messages.hpp"

namespace fedcore::server {

// A session's connection, whatever carries it: mutual TLS for real clients, a local
// socket for fedcore-sim's in-process clients. The session code sees only this.
class Link {
 public:
  virtual ~Link() = default;
  virtual boost::asio::awaitable<result<protocol::Frame>> read_frame() = 0;
  virtual void set_timeouts(std::chrono::milliseconds idle,
                            std::chrono::milliseconds transfer) noexcept = 0;
  // Queued behind the link's one writer (net/outbox.hpp).
  virtual void send(protocol::MessageType type, std::string metadata,
                    net::SharedPayload payload = nullptr) = 0;
  virtual void close() noexcept = 0;
  virtual std::uint64_t bytes_read() const noexcept = 0;
  virtual std::uint64_t bytes_written() const noexcept = 0;
};

template <class Stream>
class StreamLink final : public Link {
 public:
  StreamLink(Stream stream, const net::ChannelOptions& options)
      : channel_(std::make_shared<net::FrameChannel<Stream>>(std::move(stream), options)),
        outbox_(channel_) {}
  boost::asio::awaitable<result<protocol::Frame>> read_frame() override {
    return channel_->read_frame();
  }
  void set_timeouts(std::chrono::milliseconds idle,
                    std::chrono::milliseconds transfer) noexcept override {
    channel_->set_timeouts(idle, transfer);
  }
  void send(protocol::MessageType type, std::string metadata, net::SharedPayload payload) override {
    outbox_.send(type, std::move(metadata), std::move(payload));
  }
  void close() noexcept override { channel_->close(); }
  std::uint64_t bytes_read() const noexcept override { return channel_->bytes_read(); }
  std::uint64_t bytes_written() const noexcept override { return channel_->bytes_written(); }

 private:
  std::shared_ptr<net::FrameChannel<Stream>> channel_;
  net::Outbox<Stream> outbox_;
};

struct Session {
  std::uint64_t serial = 0;
  std::string client_id;
  std::string peer;  // address, for logs
  std::int64_t connected_ms = 0;
  protocol::Hello hello;
  std::unique_ptr<Link> link;
};

class SessionRegistry final : public SessionDirectory {
 public:
  // Makes `session` the live session of its client id; returns the one it replaced.
  std::shared_ptr<Session> add(std::shared_ptr<Session> session);
  // Removes `session` if it is the live session of its id; false if it had been replaced.
  bool remove(const Session& session);

  // SessionDirectory: sorted by client id.
  std::vector<Candidate> online() const override;
  void send_train(const std::string& client_id, std::string metadata,
                  std::shared_ptr<const std::vector<float>> global) override;

  std::size_t size() const noexcept { return sessions_.size(); }
  const std::map<std::string, std::shared_ptr<Session>>& all() const noexcept { return sessions_; }

 private:
  std::map<std::string, std::shared_ptr<Session>> sessions_;
};

}  // namespace fedcore::server
