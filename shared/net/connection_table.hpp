// ConnectionTable: who may hold a listener's connection slots.
//
// A listener that admits anyone who opens a socket can be filled by sockets that never
// present a credential: 260 idle TCP connections once kept a server's admin API
// unreachable, 1,030 kept every federation client out. The table bounds three numbers:
//   max_open                     every open connection of the listener;
//   max_unauthenticated          connections that have not yet proven who they are (TLS
//                                handshake and HELLO, or a first request), the slots an
//                                anonymous peer can take at all;
//   max_unauthenticated_per_address   of those, from one remote address, so one host
//                                cannot take them all;
//   max_open_per_address         every open connection from one address (the admin API:
//                                a browser needs a handful; federation clients behind
//                                one NAT may need many, so there it is unbounded).
// A connection enters unauthenticated (admit) and leaves that state with
// Ticket::authenticated(); the ticket gives its slot back when it goes. The listener's
// own deadline (handshake, HELLO) frees a slot nobody earns.
//
// At the totals (max_open, max_unauthenticated) a listener stops accepting until a slot
// is given back (has_room, the room callback), as HAProxy and nginx do at their
// connection limits: new connections wait in the kernel's backlog in arrival order. Had
// they been accepted and refused, every peer would reconnect at once and a legitimate
// one would win a slot only by lottery (tests/federation/storm_test.cpp). A peer over a
// per-address limit is refused at once: it is the one holding too much.
//
// Thread safety: none; the table and its tickets belong to one io_context thread.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include "shared/util/error.hpp"

namespace fedcore::net {

struct ConnectionLimits {
  std::size_t max_open = 1024;
  std::size_t max_unauthenticated = 256;
  std::size_t max_unauthenticated_per_address = 64;
  std::size_t max_open_per_address = std::numeric_limits<std::size_t>::max();
};

class ConnectionTable {
 public:
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket();
    // The peer proved who it is: its slot no longer counts against the anonymous limits.
    void authenticated() noexcept;
    bool valid() const noexcept { return table_ != nullptr; }

   private:
    friend class ConnectionTable;
    Ticket(ConnectionTable* table, std::string address) noexcept
        : table_(table), address_(std::move(address)) {}
    void release() noexcept;
    ConnectionTable* table_ = nullptr;
    std::string address_;
    bool anonymous_ = true;
  };

  explicit ConnectionTable(ConnectionLimits limits) : limits_(limits) {}
  ConnectionTable(const ConnectionTable&) = delete;
  ConnectionTable& operator=(const ConnectionTable&) = delete;

  // A slot for a new connection from `address` (any stable text form), or
  // resource_exhausted naming the limit that is full. The table must outlive the ticket.
  result<Ticket> admit(const std::string& address);

  // Whether a connection from an address with nothing open could be admitted now: both
  // totals are below their limits.
  bool has_room() const noexcept {
    return open_ < limits_.max_open && anonymous_ < limits_.max_unauthenticated;
  }
  // Called whenever a ticket gives back a slot (its anonymous one, or its whole slot) and
  // the table has room; a listener waiting for room wakes on it. Must not admit or release
  // from inside the call.
  void set_room_callback(std::function<void()> callback) { room_callback_ = std::move(callback); }

  std::size_t open() const noexcept { return open_; }
  std::size_t unauthenticated() const noexcept { return anonymous_; }
  std::size_t unauthenticated_from(const std::string& address) const;
  std::size_t open_from(const std::string& address) const;
  const ConnectionLimits& limits() const noexcept { return limits_; }

 private:
  void room_given_back() noexcept;

  ConnectionLimits limits_;
  std::size_t open_ = 0;
  std::size_t anonymous_ = 0;
  std::map<std::string, std::size_t> anonymous_by_address_;
  std::map<std::string, std::size_t> open_by_address_;
  std::function<void()> room_callback_;
};

}  // namespace fedcore::net
