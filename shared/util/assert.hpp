// FEDCORE_ASSERT: programmer errors only (docs/engineering.md, habit 3). Never reachable from
// input: anything a peer, a file or a user can cause is returned as a fedcore::error instead.
// Active in every build type; a failed assertion prints the condition, the location and
// the message, then aborts, because continuing after a broken invariant corrupts state.
#pragma once

namespace fedcore::detail {
[[noreturn]] void assert_failed(const char* condition, const char* file, int line,
                                const char* message) noexcept;
}  // namespace fedcore::detail

#define FEDCORE_ASSERT(condition, message)                                         \
  do {                                                                             \
    if (!(condition)) [[unlikely]] {                                               \
      ::fedcore::detail::assert_failed(#condition, __FILE__, __LINE__, (message)); \
    }                                                                              \
  } while (false)
