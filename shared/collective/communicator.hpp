// Communicator: one rank's membership in a collective group.
//
// It owns the rank's Transport, the job id every message is stamped with, the operation
// sequence number (advanced by every collective, so it is equal on all ranks as long as
// they call the same collectives in the same order) and the default per-operation
// timeout. Point-to-point messages have their own counters per peer and direction, since
// only two ranks take part in them.
//
// Failure is final: after any collective fails, the transport has been aborted (its
// links closed, so peers fail too) and every later operation returns errc::aborted with
// the first failure's message. Rebuild the group to continue (the launcher restarts the
// job from its last checkpoint).
//
// Thread safety: one communicator belongs to one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shared/collective/transport.hpp"

namespace fedcore::collective {

class Communicator {
 public:
  // REQUIRES: transport non-null, default_timeout > 0.
  Communicator(std::unique_ptr<Transport> transport, std::string job,
               std::chrono::milliseconds default_timeout);
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const noexcept { return transport_->rank(); }
  int size() const noexcept { return transport_->size(); }
  const std::string& job() const noexcept { return job_; }
  std::chrono::milliseconds default_timeout() const noexcept { return default_timeout_; }
  Transport& transport() noexcept { return *transport_; }
  const Transport& transport() const noexcept { return *transport_; }

  // The first failure, if any.
  const std::optional<error>& failure() const noexcept { return failure_; }

  // For the algorithms (collectives.cpp): the envelope of the next collective and the
  // deadline for a timeout (0 = default). Errors: aborted after an earlier failure.
  result<Envelope> begin(OpType op, std::uint64_t bytes);
  Clock::time_point deadline(std::chrono::milliseconds timeout) const noexcept;
  // Point-to-point envelopes: per (peer, direction) counters.
  Envelope next_send(int peer, std::uint32_t tag, std::uint64_t bytes);
  Envelope next_recv(int peer, std::uint32_t tag, std::uint64_t bytes);
  // Records `e` as the failure (if first), aborts the transport, returns `e`.
  error fail_with(error e) noexcept;

  // Seconds spent inside collectives so far (the job's communication time).
  double comm_seconds() const noexcept { return comm_seconds_; }
  void add_comm_seconds(double s) noexcept { comm_seconds_ += s; }

 private:
  std::unique_ptr<Transport> transport_;
  std::string job_;
  std::chrono::milliseconds default_timeout_;
  std::uint64_t seq_ = 0;
  std::vector<std::uint64_t> send_seq_;
  std::vector<std::uint64_t> recv_seq_;
  std::optional<error> failure_;
  double comm_seconds_ = 0;
};

}  // namespace fedcore::collective
