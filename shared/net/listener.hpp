// Opening a TCP listener: the one way Fedcore's listeners (federation, admin API) bind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
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

// Takes the connections already waiting in `acceptor`'s backlog, without blocking, at most
// `max`, and passes each to `take`; asks `room()` before each accept and stops when it says
// no (the listener's connection table is full: the rest wait in the backlog), and at the
// first accept that would block or fails (a failure is the next async_accept's to report).
// Returns how many it took.
//
// A listener that accepts with one async_accept at a time takes one connection per pass
// of its io_context's queue; under a storm of handshakes that queue is long, and a new
// connection waited seconds in the kernel's backlog, its deadlines not yet running and its
// refusal not yet sent (tests/federation/storm_test.cpp). Call it after each async_accept.
std::size_t accept_waiting(boost::asio::ip::tcp::acceptor& acceptor, std::size_t max,
                           const std::function<bool()>& room,
                           const std::function<void(boost::asio::ip::tcp::socket)>& take);

// Turns Nagle's algorithm off on a connected socket (TCP_NODELAY). Every Fedcore protocol
// writes whole frames and then waits for the peer's answer; with Nagle on, a small frame
// written after a large one waits for the peer's delayed ACK, up to 40 ms per round trip
// (docs/results.md: a 100k-parameter round of 46 ms instead of 3). Every socket the
// federation, the admin API, the client daemon and the collectives open goes through here.
// A failure (the peer already closed) is harmless and ignored: the next read reports it.
void set_no_delay(boost::asio::ip::tcp::socket& socket) noexcept;

// accept() failures that mean "the process or the system is out of something" (EMFILE,
// ENFILE, ENOBUFS, ENOMEM): retrying at once only spins, so the listener backs off.
bool is_resource_shortage(const boost::system::error_code& ec) noexcept;

// Raises this process's soft limit on open files to `wanted`, or to its hard limit if that
// is lower and the hard limit cannot be raised (raising it needs CAP_SYS_RESOURCE, which
// root has), so that the connection limits, not the default 1,024 descriptors, decide how
// many peers a server holds. Returns the soft limit now in force; never fails (an
// unchanged limit is returned as it is).
std::uint64_t raise_open_file_limit(std::uint64_t wanted = 65536) noexcept;

}  // namespace fedcore::net
