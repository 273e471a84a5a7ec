#include "tests/support/loopback_peers.hpp"

// GCC 12 inlines Asio's recycling allocator for coroutine frames and reports a
// -Wmismatched-new-delete that is not one (see server/api/api_server.cpp).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <limits>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "shared/util/rng.hpp"

namespace fedcore::testing {
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
}  // namespace

std::vector<std::uint8_t> pattern(std::size_t size, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::uint8_t> out(size);
  for (auto& b : out) {
    b = static_cast<std::uint8_t>(rng.next_u64() >> 56);
  }
  return out;
}

EchoServer::EchoServer() {
  const tcp::endpoint endpoint(asio::ip::address_v4::loopback(), 0);
  acceptor_.open(endpoint.protocol());
  acceptor_.bind(endpoint);
  acceptor_.listen();
  port_ = acceptor_.local_endpoint().port();
  asio::co_spawn(io_, accept_loop(), asio::detached);
  thread_ = std::thread([this] { io_.run(); });
}

EchoServer::~EchoServer() {
  asio::post(io_, [this] {
    error_code ignored;
    acceptor_.close(ignored);
    for (auto& weak : sockets_) {
      if (auto s = weak.lock()) {
        s->close(ignored);
      }
    }
  });
  thread_.join();
}

std::vector<EchoServer::Session> EchoServer::sessions() const {
  std::lock_guard lock(mutex_);
  return sessions_;
}

bool EchoServer::wait_for(const std::function<bool(const std::vector<Session>&)>& done,
                          std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return done(sessions_); });
}

asio::awaitable<void> EchoServer::accept_loop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(kNoThrow);
    if (!acceptor_.is_open()) {
      co_return;
    }
    if (ec) {
      continue;
    }
    auto s = std::make_shared<tcp::socket>(std::move(socket));
    sockets_.remove_if([](const auto& weak) { return weak.expired(); });
    sockets_.push_back(s);
    std::size_t index = 0;
    {
      std::lock_guard lock(mutex_);
      sessions_.emplace_back();
      index = sessions_.size() - 1;
    }
    changed_.notify_all();
    asio::co_spawn(io_, echo(std::move(s), index), asio::detached);
  }
}

// After a failed write the loop keeps reading without echoing, so that `received` counts
// every byte that reached this socket even when the peer reset it mid-echo.
asio::awaitable<void> EchoServer::echo(std::shared_ptr<tcp::socket> s, std::size_t index) {
  std::vector<std::uint8_t> buffer(std::size_t{16} << 10);
  bool echoing = true;
  error_code end;
  for (;;) {
    auto in = asio::buffer(buffer);
    auto [ec, n] = co_await s->async_read_some(in, kNoThrow);
    if (n > 0) {
      {
        std::lock_guard lock(mutex_);
        sessions_[index].received += n;
      }
      changed_.notify_all();
    }
    if (ec) {
      end = ec;
      break;
    }
    if (echoing) {
      auto out = asio::buffer(buffer.data(), n);
      auto [write_ec, written] = co_await asio::async_write(*s, out, kNoThrow);
      (void)written;
      echoing = !write_ec;
    }
  }
  error_code ignored;
  if (end == asio::error::eof) {
    s->shutdown(tcp::socket::shutdown_send, ignored);
  }
  s->close(ignored);
  {
    std::lock_guard lock(mutex_);
    sessions_[index].ended = true;
    sessions_[index].end = end;
  }
  changed_.notify_all();
}

TestClient::TestClient(std::uint16_t port, std::chrono::milliseconds timeout) {
  const tcp::endpoint endpoint(asio::ip::address_v4::loopback(), port);
  bool done = false;
  socket_.async_connect(endpoint, [&](const error_code& ec) {
    connect_error_ = ec;
    done = true;
  });
  if (!run(timeout) || !done) {
    connect_error_ = asio::error::timed_out;
    return;
  }
  if (!connect_error_) {
    error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
  }
}

bool TestClient::run(std::chrono::milliseconds timeout) {
  io_.restart();
  io_.run_for(timeout);
  if (io_.stopped()) {
    return true;
  }
  error_code ignored;
  socket_.cancel(ignored);
  io_.restart();
  io_.run();
  return false;
}

error_code TestClient::write(std::span<const std::uint8_t> data,
                             std::chrono::milliseconds timeout) {
  error_code result;
  asio::async_write(socket_, asio::buffer(data.data(), data.size()),
                    [&](const error_code& ec, std::size_t) { result = ec; });
  if (!run(timeout)) {
    return asio::error::timed_out;
  }
  return result;
}

void TestClient::read_into(Received& r, std::size_t wanted, bool& done) {
  buffer_.resize(std::size_t{64} << 10);
  socket_.async_read_some(asio::buffer(buffer_),
                          [this, &r, wanted, &done](const error_code& ec, std::size_t n) {
                            if (n > 0) {
                              r.data.insert(r.data.end(), buffer_.begin(),
                                            buffer_.begin() + static_cast<std::ptrdiff_t>(n));
                              r.reads.push_back(n);
                            }
                            if (ec) {
                              r.ec = ec;
                              done = true;
                            } else if (r.data.size() >= wanted) {
                              done = true;
                            } else {
                              read_into(r, wanted, done);
                            }
                          });
}

TestClient::Received TestClient::read(std::size_t wanted, std::chrono::milliseconds timeout) {
  Received r;
  if (wanted == 0) {
    return r;
  }
  bool done = false;
  read_into(r, wanted, done);
  if (!run(timeout) || !done) {
    r.ec = asio::error::timed_out;
  }
  return r;
}

TestClient::Received TestClient::exchange(std::span<const std::uint8_t> data,
                                          std::chrono::milliseconds timeout) {
  Received r;
  error_code write_error;
  asio::async_write(socket_, asio::buffer(data.data(), data.size()),
                    [&](const error_code& ec, std::size_t) { write_error = ec; });
  bool done = false;
  read_into(r, data.size(), done);
  if (!run(timeout) || !done) {
    r.ec = asio::error::timed_out;
  } else if (!r.ec) {
    r.ec = write_error;
  }
  return r;
}

TestClient::Received TestClient::read_to_end(std::chrono::milliseconds timeout) {
  return read(std::numeric_limits<std::size_t>::max(), timeout);
}

void TestClient::shutdown_send() {
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
}

void TestClient::close() {
  error_code ignored;
  socket_.close(ignored);
}

}  // namespace fedcore::testing
