// Loopback peers for network tests: an echo server on its own thread and a client whose
// every operation has a deadline. Both speak plain TCP on 127.0.0.1.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace fedcore::testing {

// `size` bytes drawn from Rng(seed): test data whose every position differs from its
// neighbours, so a lost, repeated or reordered piece shows.
std::vector<std::uint8_t> pattern(std::size_t size, std::uint64_t seed);

// Echoes every byte it receives on each connection, and records per connection how many
// bytes it received and how the connection ended. The destructor closes every socket and
// joins the thread. Thread safety: all public member functions.
class EchoServer {
 public:
  struct Session {
    std::uint64_t received = 0;
    bool ended = false;
    boost::system::error_code end;  // eof for a clean close; set when `ended`
  };

  EchoServer();
  ~EchoServer();
  EchoServer(const EchoServer&) = delete;
  EchoServer& operator=(const EchoServer&) = delete;

  std::uint16_t port() const noexcept { return port_; }
  // One entry per accepted connection, in accept order.
  std::vector<Session> sessions() const;
  // Waits until `done(sessions)` holds or the timeout passes.
  bool wait_for(const std::function<bool(const std::vector<Session>&)>& done,
                std::chrono::milliseconds timeout) const;

 private:
  boost::asio::awaitable<void> accept_loop();
  boost::asio::awaitable<void> echo(std::shared_ptr<boost::asio::ip::tcp::socket> socket,
                                    std::size_t index);

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::vector<Session> sessions_;                                   // guarded by mutex_
  std::list<std::weak_ptr<boost::asio::ip::tcp::socket>> sockets_;  // server thread only
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_{io_};
  std::uint16_t port_ = 0;
  std::thread thread_;
};

// A TCP client with a deadline on every call, driven on the caller's thread. A call that
// runs out of time cancels its operations and reports boost::asio::error::timed_out.
// Thread safety: none; one thread uses it.
class TestClient {
 public:
  struct Received {
    boost::system::error_code ec;    // empty when the wanted bytes all arrived
    std::vector<std::uint8_t> data;  // everything that arrived, even when ec is set
    std::vector<std::size_t> reads;  // the size of each read that returned data
  };

  // Connects to 127.0.0.1:port (see connect_error()).
  explicit TestClient(std::uint16_t port,
                      std::chrono::milliseconds timeout = std::chrono::seconds(5));
  boost::system::error_code connect_error() const noexcept { return connect_error_; }

  boost::system::error_code write(std::span<const std::uint8_t> data,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Reads until `wanted` bytes arrived, the peer closed or reset, or the timeout passed.
  Received read(std::size_t wanted, std::chrono::milliseconds timeout);
  // Writes `data` and reads data.size() bytes of echo at the same time.
  Received exchange(std::span<const std::uint8_t> data, std::chrono::milliseconds timeout);
  // Reads until the peer closes or resets (ec then says which) or the timeout passes.
  Received read_to_end(std::chrono::milliseconds timeout);

  void shutdown_send();
  void close();

 private:
  // Runs the io_context until the started operations end or the timeout passes; then
  // cancels what is left and lets it finish. True when they ended in time.
  bool run(std::chrono::milliseconds timeout);
  void read_into(Received& r, std::size_t wanted, bool& done);

  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_{io_};
  boost::system::error_code connect_error_;
  std::vector<std::uint8_t> buffer_;
};

}  // namespace fedcore::testing
