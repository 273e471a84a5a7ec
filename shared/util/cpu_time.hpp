// CpuTimes: how much processor time a process has used, split into user and kernel
// (system) time. The run controller reads it at a round's start and end to record the
// server's CPU cost per round (store::RoundPhases); it is injected like the clock, so a
// test can supply its own readings.
//
// Thread safety: process_cpu_times() may be called from any thread.
#pragma once

#include <functional>

namespace fedcore {

struct CpuTimes {
  double user_s = 0;
  double system_s = 0;
};

// Every thread of this process so far (getrusage(RUSAGE_SELF)); zeros if the call fails.
CpuTimes process_cpu_times() noexcept;

using CpuTimeSource = std::function<CpuTimes()>;

}  // namespace fedcore
