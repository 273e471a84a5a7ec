#include "shared/net/listener.hpp"

#include <algorithm>
#include <sys/resource.h>

namespace fedcore::net {
namespace asio = boost::asio;
using asio::ip::tcp;

result<std::uint16_t> open_listener(tcp::acceptor& acceptor, const std::string& address,
                                    std::uint16_t port) {
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(address, ec);
  if (ec) {
    return fail(errc::invalid_argument, "listen address '" + address + "': " + ec.message());
  }
  const tcp::endpoint endpoint(ip, port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) {
    // A restarted server must not wait for the old process's sockets in TIME_WAIT.
    acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  }
  if (!ec) {
    acceptor.bind(endpoint, ec);
  }
  if (!ec) {
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec) {
    return fail(errc::unavailable,
                "cannot listen on " + address + ":" + std::to_string(port) + ": " + ec.message());
  }
  return acceptor.local_endpoint().port();
}

std::size_t accept_waiting(tcp::acceptor& acceptor, std::size_t max,
                           const std::function<bool()>& room,
                           const std::function<void(tcp::socket)>& take) {
  boost::system::error_code ec;
  acceptor.non_blocking(true, ec);  // only this synchronous accept: async ones never block
  std::size_t taken = 0;
  while (!ec && taken < max && room()) {
    tcp::socket socket(acceptor.get_executor());
    acceptor.accept(socket, ec);
    if (!ec) {
      ++taken;
      take(std::move(socket));
    }
  }
  return taken;
}

void set_no_delay(tcp::socket& socket) noexcept {
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
}

bool is_resource_shortage(const boost::system::error_code& ec) noexcept {
  return ec == boost::system::errc::too_many_files_open ||
         ec == boost::system::errc::too_many_files_open_in_system ||
         ec == boost::system::errc::no_buffer_space || ec == boost::system::errc::not_enough_memory;
}

std::uint64_t raise_open_file_limit(std::uint64_t wanted) noexcept {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return 0;
  }
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < wanted) {
    rlimit higher = limit;
    higher.rlim_max = static_cast<rlim_t>(wanted);
    if (setrlimit(RLIMIT_NOFILE, &higher) == 0) {
      limit.rlim_max = higher.rlim_max;  // permitted: the soft limit below may follow
    }
  }
  const rlim_t target = std::min<rlim_t>(limit.rlim_max, static_cast<rlim_t>(wanted));
  if (limit.rlim_cur < target) {
    rlimit raised = limit;
    raised.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      return raised.rlim_cur;
    }
  }
  return limit.rlim_cur;
}

}  // namespace fedcore::net
