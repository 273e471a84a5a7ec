#include "shared/util/test_point.hpp"

#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <string>
#include <thread>
#include <unistd.h>

namespace fedcore {
namespace {

struct Settings {
  int trace_fd = -1;
  std::string pause_name;
  long pause_at = 0;  // 0: never pause
  bool active() const noexcept { return trace_fd >= 0 || pause_at > 0; }
};

Settings read_settings() {
  Settings s;
  if (const char* trace = std::getenv("FEDCORE_TEST_TRACE"); trace != nullptr && *trace != 0) {
    // Kept open for the life of the process: a point may be passed at any time, and the
    // descriptor is what makes each line one atomic append.
    s.trace_fd = ::open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  if (const char* pause = std::getenv("FEDCORE_TEST_PAUSE_AT"); pause != nullptr) {
    const std::string_view spec(pause);
    const auto colon = spec.rfind(':');
    long n = 0;
    if (colon != std::string_view::npos && colon > 0) {
      const auto digits = spec.substr(colon + 1);
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
      if (ec == std::errc() && end == digits.data() + digits.size() && n >= 1) {
        s.pause_name = std::string(spec.substr(0, colon));
        s.pause_at = n;
      }
    }
  }
  return s;
}

void append(int fd, std::string_view prefix, std::string_view name, std::string_view detail) {
  if (fd < 0) {
    return;
  }
  std::string line;
  line.reserve(prefix.size() + name.size() + detail.size() + 2);
  line.append(prefix).append(name).append(" ").append(detail).append("\n");
  // One write, so a line is either wholly in the file or absent; a failed trace write
  // must not change what the process does, so its result is deliberately dropped.
  if (::write(fd, line.data(), line.size()) < 0) {
    return;
  }
}

}  // namespace

void test_point(std::string_view name, std::string_view detail) {
  static const Settings settings = read_settings();
  if (!settings.active()) {
    return;
  }
  append(settings.trace_fd, "", name, detail);
  if (settings.pause_at == 0 || name != settings.pause_name) {
    return;
  }
  static std::atomic<long> passed{0};
  if (passed.fetch_add(1) + 1 != settings.pause_at) {
    return;
  }
  append(settings.trace_fd, "paused ", name, detail);
  // Stopped here until the test's SIGKILL; bounded, so that a process whose test died
  // (and will never kill it) ends by itself instead of holding its port and files.
  std::this_thread::sleep_for(std::chrono::seconds(60));
  std::raise(SIGKILL);
}

}  // namespace fedcore
