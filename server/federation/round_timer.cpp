#include "server/federation/round_timer.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

namespace fedcore::federation {
namespace {

double ms_between(Clock::steady_time from, Clock::steady_time to) {
  return std::max(0.0, std::chrono::duration<double, std::milli>(to - from).count());
}

}  // namespace

RoundTimer::RoundTimer(const Clock& clock, CpuTimeSource cpu)
    : clock_(clock), cpu_(std::move(cpu)), start_(clock.steady()), cpu_start_(cpu_()) {}

double RoundTimer::offset_ms() const {
  return ms_between(start_, clock_.steady());
}

void RoundTimer::requests_queued() {
  phases_.requests_queued_ms = offset_ms();
}

void RoundTimer::train_written() {
  phases_.train_written_ms = offset_ms();
}

void RoundTimer::update_received() {
  const double at = offset_ms();
  if (!phases_.first_update_ms) {
    phases_.first_update_ms = at;
  }
  phases_.last_update_ms = at;
}

void RoundTimer::closed() {
  if (!phases_.closed_ms) {
    phases_.closed_ms = offset_ms();
  }
}

void RoundTimer::add(double store::RoundPhases::*field, Clock::steady_time since) {
  add(field, since, clock_.steady());
}

void RoundTimer::add(double store::RoundPhases::*field, Clock::steady_time from,
                     Clock::steady_time to) {
  phases_.*field += ms_between(from, to);
}

void RoundTimer::federated_evaluation(Clock::steady_time since) {
  phases_.federated_evaluation_ms = ms_between(since, clock_.steady());
}

void RoundTimer::stop() {
  stopped_ = clock_.steady();
  cpu_stopped_ = cpu_();
}

store::RoundPhases RoundTimer::phases(std::int64_t run_id, std::int64_t round,
                                      std::int64_t attempt) const {
  store::RoundPhases out = phases_;
  out.run_id = run_id;
  out.round = round;
  out.attempt = attempt;
  out.total_ms = stopped_ ? ms_between(start_, *stopped_) : offset_ms();
  // CPU time never runs backwards; the max guards a source that reads zeros on failure.
  const CpuTimes cpu_now = stopped_ ? cpu_stopped_ : cpu_();
  out.cpu_user_ms = std::max(0.0, cpu_now.user_s - cpu_start_.user_s) * 1000;
  out.cpu_system_ms = std::max(0.0, cpu_now.system_s - cpu_start_.system_s) * 1000;
  return out;
}

}  // namespace fedcore::federation
