#include "tests/support/tcp_sockets.hpp"

#include <filesystem>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string>
#include <sys/socket.h>

namespace fedcore::testing {
namespace {

int int_option(int fd, int level, int name) {
  int value = 0;
  socklen_t length = sizeof(value);
  return getsockopt(fd, level, name, &value, &length) == 0 ? value : -1;
}

// The port of a sockaddr_storage of either family; 0 for anything else.
std::uint16_t port_of(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  }
  return 0;
}

}  // namespace

std::vector<TcpSocket> connected_tcp_sockets() {
  std::vector<TcpSocket> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    if (ec || target.string().rfind("socket:", 0) != 0) {
      ec.clear();
      continue;
    }
    const int fd = std::stoi(entry.path().filename().string());
    const int domain = int_option(fd, SOL_SOCKET, SO_DOMAIN);
    if ((domain != AF_INET && domain != AF_INET6) ||
        int_option(fd, SOL_SOCKET, SO_TYPE) != SOCK_STREAM ||
        int_option(fd, SOL_SOCKET, SO_ACCEPTCONN) != 0) {
      continue;
    }
    sockaddr_storage local{}, peer{};
    socklen_t local_length = sizeof(local), peer_length = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0) {
      continue;  // not connected (yet, or any more)
    }
    out.push_back(
        {fd, port_of(local), port_of(peer), int_option(fd, IPPROTO_TCP, TCP_NODELAY) == 1});
  }
  return out;
}

}  // namespace fedcore::testing
