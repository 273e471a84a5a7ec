// The one place Fedcore includes Eigen. Include "util/eigen.hpp", never <Eigen/Core>.
//
// GCC 12 (Debian 12 ships 12.2) raises a false -Wmaybe-uninitialized inside its
// own AVX-512 intrinsics when Eigen's AVX-512 packets are inlined into our code: the
// intrinsics pass `_mm512_undefined_ps()` (a self-initialised `__m512 __Y = __Y;`) as the
// ignored merge source of an unmasked operation (GCC bug 105593; GCC 13 no longer warns).
// It only appears when the code is compiled for AVX-512 (-march=x86-64-v4, or native on
// such a CPU). GCC checks diagnostic pragmas at every location of an inlining chain, so
// ignoring the warning around this include covers Eigen's and the intrinsics' lines and
// leaves -Wmaybe-uninitialized on for our own code.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__) && __GNUC__ < 13
#define FEDCORE_GCC_BUG_105593 1
#endif

#ifdef FEDCORE_GCC_BUG_105593
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <Eigen/Core>

#ifdef FEDCORE_GCC_BUG_105593
#pragma GCC diagnostic pop
#undef FEDCORE_GCC_BUG_105593
#endif
