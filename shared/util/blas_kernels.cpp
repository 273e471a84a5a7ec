#include "shared/util/blas_kernels.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

// OpenBLAS's own entry point, declared weak: a build whose products go to another BLAS
// links without it.
#ifdef EIGEN_USE_BLAS
extern "C" char* openblas_get_corename(void) __attribute__((weak));
#endif

namespace fedcore {

std::string blas_core_name() {
#ifdef EIGEN_USE_BLAS
  if (openblas_get_corename != nullptr) {
    const char* name = openblas_get_corename();
    return name != nullptr ? name : "";
  }
#endif
  return "";
}

bool blas_core_uses_avx512() {
  std::string name = blas_core_name();
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  constexpr std::array<std::string_view, 3> kAvx512Cores = {"skylakex", "cooperlake",
                                                            "sapphirerapids"};
  return std::find(kAvx512Cores.begin(), kAvx512Cores.end(), name) != kAvx512Cores.end();
}

}  // namespace fedcore
