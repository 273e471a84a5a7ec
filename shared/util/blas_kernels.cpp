#include "shared/util/blas_kernels.hpp"

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

}  // namespace fedcore
