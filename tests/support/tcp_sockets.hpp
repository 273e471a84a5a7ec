// The connected TCP sockets of this process, as the kernel sees them, for tests that check
// socket options the product sets on sockets they cannot reach (a server's accepted
// sockets, a daemon's connection): /proc/self/fd, getsockname/getpeername, getsockopt.
#pragma once

#include <cstdint>
#include <vector>

namespace fedcore::testing {

struct TcpSocket {
  int fd = -1;
  std::uint16_t local_port = 0;
  std::uint16_t peer_port = 0;
  bool no_delay = false;  // TCP_NODELAY
};

// Every connected IPv4/IPv6 stream socket of this process (listening sockets excluded).
std::vector<TcpSocket> connected_tcp_sockets();

}  // namespace fedcore::testing
