// Test support: runs one function per rank, each rank a thread, over a chosen transport.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collective/collectives.hpp"

namespace fedcore::collective::testing {

enum class Kind { inproc, tcp, tls };
const char* kind_name(Kind kind);

using RankFn = std::function<void(Communicator&)>;

struct GroupOptions {
  std::string job = "test-job";
  std::chrono::milliseconds timeout{std::chrono::seconds(20)};
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(20)};
  // Per-rank job ids (empty: every rank uses `job`).
  std::vector<std::string> jobs;
};

// Connects `size` ranks over `kind` and runs fn(comm) on each rank's thread; returns once
// all threads finished. A connection failure is reported by ADD_FAILURE and the rank's fn
// is not called. For Kind::tls a PKI is made once per process (certs/fedcore-pki).
void run_group(Kind kind, int size, const RankFn& fn, const GroupOptions& options = {});

// Like run_group but returns each rank's connection result instead of calling a function.
std::vector<result<void>> connect_only(Kind kind, int size, const GroupOptions& options);

}  // namespace fedcore::collective::testing
