#include "shared/util/assert.hpp"

#include <cstdio>
#include <cstdlib>

namespace fedcore::detail {

void assert_failed(const char* condition, const char* file, int line,
                   const char* message) noexcept {
  std::fprintf(stderr, "fedcore: assertion failed: %s at %s:%d: %s\n", condition, file, line,
               message);
  std::abort();
}

}  // namespace fedcore::detail
