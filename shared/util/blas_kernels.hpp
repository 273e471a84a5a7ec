// Which of OpenBLAS's CPU-specific kernels Eigen's large products run on.
//
// Debian's OpenBLAS (0.3.21, built for every x86-64 core) picks its kernels at load time
// from the CPU, unless OPENBLAS_CORETYPE names a core. The choice moves a CNN training
// step by 1.4x on an AVX-512 machine (Haswell's AVX2 kernels against Cooperlake's), so
// benchmarks record it (bench/train_step_bench.cpp) and give a peer the same
// (bench/compare_torch.sh).
#pragma once

#include <string>

namespace fedcore {

// OpenBLAS's current core ("Cooperlake", "Haswell", ...), or "" when products do not go to
// OpenBLAS.
std::string blas_core_name();

// Whether that core's kernels are OpenBLAS's AVX-512 ones (SkylakeX, Cooperlake,
// SapphireRapids); false when products do not go to OpenBLAS.
bool blas_core_uses_avx512();

}  // namespace fedcore
