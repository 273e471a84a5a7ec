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
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "server/federation/run_controller.hpp"
#include "shared/net/link.hpp"
#include "shared/protocol/messages.hpp"

namespace fedcore::federation {

struct Session {
  std::uint64_t serial = 0;
  std::string client_id;
  std::string peer;                // address, for logs
  std::string certificate_serial;  // uppercase hex; "" for in-process clients
  std::int64_t connected_ms = 0;
  protocol::Hello hello;
  std::unique_ptr<net::Link> link;  // mutual TLS, or a local socket for fedcore-sim
};

class SessionRegistry final : public SessionDirectory {
 public:
  // What uploads_done() does (the server frees its payload gate's kept buffers).
  std::function<void()> on_uploads_done;
  void uploads_done() override {
    if (on_uploads_done) {
      on_uploads_done();
    }
  }
  // Makes `session` the live session of its client id; returns the one it replaced.
  std::shared_ptr<Session> add(std::shared_ptr<Session> session);
  // Removes `session` if it is the live session of its id; false if it had been replaced.
  bool remove(const Session& session);

  // SessionDirectory: sorted by client id.
  std::vector<Candidate> online() const override;
  void send_train(const std::string& client_id, std::string metadata,
                  std::shared_ptr<const std::vector<float>> global,
                  std::function<void()> written) override;
  void send(const std::string& client_id, protocol::MessageType type, std::string metadata,
            std::shared_ptr<const std::vector<float>> payload) override;

  std::size_t size() const noexcept { return sessions_.size(); }
  const std::map<std::string, std::shared_ptr<Session>>& all() const noexcept { return sessions_; }

 private:
  std::map<std::string, std::shared_ptr<Session>> sessions_;
};

}  // namespace fedcore::federation
