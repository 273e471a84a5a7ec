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

// accept() failures that mean "the process or the system is out of something" (EMFILE,
// ENFILE, ENOBUFS, ENOMEM): retrying at once only spins, so the listener backs off.
bool is_resource_shortage(const boost::system::error_code& ec) noexcept;

// Raises this process's soft limit on open files to its hard limit (capped at `wanted`),
// so that the connection limits, not the default 1,024 descriptors, decide how many
// peers a server holds. Returns the soft limit now in force; never fails (an unchanged
// limit is returned as it is).
std::uint64_t raise_open_file_limit(std::uint64_t wanted = 65536) noexcept;

}  // namespace fedcore::net
