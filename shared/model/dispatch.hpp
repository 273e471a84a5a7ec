// FEDCORE_DISPATCH: compile a function once per instruction set level and let the loader
// pick the best one the CPU has (GCC target_clones, an ifunc). CMake defines
// FEDCORE_DISPATCH_CLONES for the files that use it in portable GCC builds on x86-64
// (shared/CMakeLists.txt); elsewhere the build's own -march is all there is.
#pragma once

#if defined(FEDCORE_DISPATCH_CLONES)
#define FEDCORE_DISPATCH \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define FEDCORE_DISPATCH
#endif
