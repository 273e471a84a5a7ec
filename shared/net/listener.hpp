// Opening a TCP listener: the one way Fedcore's listeners (federation, admin API) bind.
#pragma once

#include <cstdint>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "shared/util/error.hpp"

namespace fedcore::net {

// Opens `acceptor` on address:port (port 0 = any free port) with SO_REUSEADDR and the
// system's maximum backlog; returns the bound port.
// Errors: invalid_argument (not an IP address, the message quotes it); unavailable (open,
// bind or listen failed, e.g. the port is taken; the message names address:port).
result<std::uint16_t> open_listener(boost::asio::ip::tcp::acceptor& acceptor,
                                    const std::string& address, std::uint16_t port);

}  // namespace fedcore::net
