#include "shared/net/listener.hpp"

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

}  // namespace fedcore::net
