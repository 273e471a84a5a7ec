// RoundTimer: where one round attempt spends its time, as store::RoundPhases.
//
// The run controller starts one when a round begins and marks the round's milestones
// (every TRAIN queued, the last TRAIN written to its socket, the first and the last update
// received) as offsets from that start, adds up the time of each kind of work (validating
// updates, aggregating, evaluating, writing the checkpoint, committing) and, when the
// round's row is written, reads the process's CPU time again. Time comes from the injected
// Clock and CPU time from the injected CpuTimeSource, so a test with a ManualClock gets
// exact figures.
//
// Thread safety: none; one timer belongs to its round (the run controller's thread).
#pragma once

#include <cstdint>
#include <optional>

#include "server/store/records.hpp"
#include "shared/util/clock.hpp"
#include "shared/util/cpu_time.hpp"

namespace fedcore::federation {

class RoundTimer {
 public:
  // Starts now. REQUIRES: `clock` outlives the timer; `cpu` is callable.
  RoundTimer(const Clock& clock, CpuTimeSource cpu);

  Clock::steady_time now() const { return clock_.steady(); }
  // Milestones, as offsets from the start. The TRAIN-written mark keeps the latest call
  // (the last client's frame); the update mark sets first_update_ms once and moves
  // last_update_ms on every call.
  void requests_queued();
  void train_written();
  void update_received();
  // The round closed (its row's finished time is taken now); the first call counts.
  void closed();
  // Adds the time since `since` to a duration field (validate_ms, aggregate_ms, ...).
  void add(double store::RoundPhases::*field, Clock::steady_time since);
  // Adds the span [from, to] (measured elsewhere: a checkpoint written by the worker).
  void add(double store::RoundPhases::*field, Clock::steady_time from, Clock::steady_time to);
  // The federated evaluation stage ran from `since` until now.
  void federated_evaluation(Clock::steady_time since);

  // Ends the round's own time here: total_ms and the CPU time stop now, while durations
  // measured later (a checkpoint written on the worker during the next round, the commit)
  // are still added. So a round that overlaps the next one does not count the next one's
  // time and CPU as its own.
  void stop();

  // The phases so far with total_ms and the CPU time up to now (or up to stop()), for
  // attempt `attempt` of round `round` of run `run_id`.
  store::RoundPhases phases(std::int64_t run_id, std::int64_t round, std::int64_t attempt) const;

 private:
  double offset_ms() const;

  const Clock& clock_;
  CpuTimeSource cpu_;
  Clock::steady_time start_;
  CpuTimes cpu_start_;
  std::optional<Clock::steady_time> stopped_;
  CpuTimes cpu_stopped_;
  store::RoundPhases phases_;
};

}  // namespace fedcore::federation
