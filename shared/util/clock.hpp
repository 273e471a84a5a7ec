// Clock: where time comes from, injected (docs/engineering.md, habit 7).
//
// Two readings, kept apart on purpose: `steady()` measures intervals and deadlines and
// never jumps; `wall_ms()` is what the history records (milliseconds since the Unix
// epoch) and may jump with NTP. Deadlines are never computed from wall time.
//
// SystemClock reads the real clocks; ManualClock is for tests: it stands still until the
// test advances it, so a test can walk a round past its deadline without sleeping.
//
// Thread safety: SystemClock is stateless; ManualClock is not synchronised (one thread).
#pragma once

#include <chrono>
#include <cstdint>

namespace fedcore {

class Clock {
 public:
  using steady_time = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual steady_time steady() const = 0;
  virtual std::int64_t wall_ms() const = 0;
};

class SystemClock final : public Clock {
 public:
  steady_time steady() const override { return std::chrono::steady_clock::now(); }
  std::int64_t wall_ms() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

class ManualClock final : public Clock {
 public:
  // Starts at an arbitrary fixed instant, the same in every test run.
  explicit ManualClock(std::int64_t wall_ms = 1'700'000'000'000) : wall_ms_(wall_ms) {}
  steady_time steady() const override { return steady_; }
  std::int64_t wall_ms() const override { return wall_ms_; }
  // Moves both readings forward by `by`.
  void advance(std::chrono::milliseconds by) {
    steady_ += by;
    wall_ms_ += by.count();
  }

 private:
  steady_time steady_{std::chrono::hours(1)};
  std::int64_t wall_ms_;
};

}  // namespace fedcore
