// Test support: runs one function per rank, each rank a thread, over a chosen transport.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shared/collective/collectives.hpp"

namespace fedcore::collective::testing {

// tcp_shm and tls_shm: as tcp and tls, with shared-memory payload rings between the
// ranks (a small ring, so that large operations also take the socket when it is full)
// and waits that poll for a while before they sleep (NetOptions::spin).
enum class Kind { inproc, tcp, tls, tcp_shm, tls_shm };
inline bool uses_tls(Kind kind) {
  return kind == Kind::tls || kind == Kind::tls_shm;
}
inline bool uses_rings(Kind kind) {
  return kind == Kind::tcp_shm || kind == Kind::tls_shm;
}
const char* kind_name(Kind kind);

using RankFn = std::function<void(Communicator&)>;

struct GroupOptions {
  std::string job = "test-job";
  std::chrono::milliseconds timeout{std::chrono::seconds(20)};
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(20)};
  // Per-rank job ids (empty: every rank uses `job`).
  std::vector<std::string> jobs;
  // Per-rank shared-memory ring sizes for tcp/tls kinds (empty: as the kind says).
  std::vector<std::size_t> ring_bytes;
};

// Connects `size` ranks over `kind` and runs fn(comm) on each rank's thread; returns once
// all threads finished. A connection failure is reported by ADD_FAILURE and the rank's fn
// is not called. For Kind::tls a PKI is made once per process (certs/fedcore-pki).
void run_group(Kind kind, int size, const RankFn& fn, const GroupOptions& options = {});

// Like run_group but returns each rank's connection result instead of calling a function.
std::vector<result<void>> connect_only(Kind kind, int size, const GroupOptions& options);

}  // namespace fedcore::collective::testing
