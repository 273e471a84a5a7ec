// The latency floor (issue 20): Nagle's algorithm is off on every socket the federation
// server accepts, on every client daemon's connection and on every socket the admin API
// accepts. With it on, a small frame written after a large one waits for the peer's
// delayed ACK (40 ms a round trip). Checked with getsockopt on the sockets themselves
// (tests/support/tcp_sockets.hpp), since the product keeps them to itself.
#include <chrono>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <gtest/gtest.h>

#include "tests/api/api_fixture.hpp"
#include "tests/support/tcp_sockets.hpp"

namespace fedcore::api {
namespace {

using namespace std::chrono_literals;
using fedcore::testing::connected_tcp_sockets;
using fedcore::testing::TcpSocket;

struct Sockets {
  std::vector<TcpSocket> federation_accepted;  // local port: the federation listener
  std::vector<TcpSocket> daemons;              // peer port: the federation listener
  std::vector<TcpSocket> api_accepted;         // local port: the admin API
  std::vector<TcpSocket> test_side;            // peer port: the admin API (this test's)
};

Sockets sockets_of(std::uint16_t federation_port, std::uint16_t api_port) {
  Sockets out;
  for (const auto& s : connected_tcp_sockets()) {
    if (s.local_port == federation_port) {
      out.federation_accepted.push_back(s);
    } else if (s.peer_port == federation_port) {
      out.daemons.push_back(s);
    } else if (s.local_port == api_port) {
      out.api_accepted.push_back(s);
    } else if (s.peer_port == api_port) {
      out.test_side.push_back(s);
    }
  }
  return out;
}

TEST(NoDelay, EverySocketOfTheServersAndTheDaemonsHasNagleOff) {
  testing::ApiFixture fixture;
  fixture.start_client("hospital-a");
  fixture.start_client("hospital-b");
  ASSERT_TRUE(fixture.wait_until([&] { return fixture.online() == 2; }, 60s));

  // A plain TCP connection to the admin API, held open: the server accepts it and waits
  // for its TLS handshake. Polled (bounded) until the accepted end shows up.
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket raw(io);
  raw.connect({boost::asio::ip::make_address("127.0.0.1"), fixture.api_port()});
  Sockets seen;
  for (int look = 0; look < 500; ++look) {
    seen = sockets_of(fixture.federation_port(), fixture.api_port());
    if (!seen.api_accepted.empty()) {
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(seen.federation_accepted.size(), 2u);
  ASSERT_EQ(seen.daemons.size(), 2u);
  ASSERT_EQ(seen.api_accepted.size(), 1u);
  for (const auto* group : {&seen.federation_accepted, &seen.daemons, &seen.api_accepted}) {
    for (const auto& s : *group) {
      EXPECT_TRUE(s.no_delay) << "fd " << s.fd << " (" << s.local_port << " -> " << s.peer_port
                              << ") has Nagle on";
    }
  }
  // The check can fail: this test's own socket keeps the kernel's default, Nagle on.
  ASSERT_EQ(seen.test_side.size(), 1u);
  EXPECT_FALSE(seen.test_side.front().no_delay);
}

}  // namespace
}  // namespace fedcore::api
