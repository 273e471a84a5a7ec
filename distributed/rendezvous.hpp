// The TCP rendezvous of fedcore-dist: how workers started separately (by the launcher,
// by hand, on several hosts) find each other.
//
// Rank 0 hosts a RendezvousServer at the agreed HOST:PORT; every rank, rank 0 included,
// joins with TcpRendezvous::exchange: it dials the server (retrying until the join
// deadline, since rank 0 may start last), sends join {job, rank, world, address} and
// waits. Once all `world` ranks have joined, the server answers each with the roster of
// addresses and closes; ranks then connect their mesh (collective/net_transport.hpp).
// A join that does not complete within the join timeout fails on every waiting rank
// (errc::deadline_exceeded). Hellos for another job or world size, or a repeated rank,
// are refused (errc::permission_denied on that rank).
//
// The rendezvous itself is plain TCP on a trusted network: it carries only addresses;
// with --transport tls the links it leads to authenticate each other.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "shared/collective/rendezvous.hpp"

namespace fedcore::distributed {

class RendezvousServer {
 public:
  // Starts listening on host:port (port 0 picks one, see port()) and serves one
  // rendezvous of `world` ranks of `job` on a thread of its own, for at most
  // `join_timeout`. Errors: invalid_argument (host), unavailable (cannot listen).
  static result<std::unique_ptr<RendezvousServer>> start(const std::string& host, int port,
                                                         std::string job, int world,
                                                         std::chrono::milliseconds join_timeout);
  ~RendezvousServer();  // waits for the thread (bounded by the join timeout)
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const noexcept { return port_; }

  struct State;

 private:
  RendezvousServer() = default;
  std::shared_ptr<State> state_;
  std::thread thread_;
  int port_ = 0;
};

class TcpRendezvous final : public collective::Rendezvous {
 public:
  // `server` is "host:port".
  TcpRendezvous(std::string server, std::string job)
      : server_(std::move(server)), job_(std::move(job)) {}
  result<std::vector<std::string>> exchange(int rank, int size, const std::string& address,
                                            collective::Clock::time_point deadline) override;

 private:
  std::string server_;
  std::string job_;
};

// "host:port" split; errors: invalid_argument.
result<std::pair<std::string, int>> split_host_port(const std::string& address);

}  // namespace fedcore::distributed
