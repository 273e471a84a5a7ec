# Compiler cache (Debian's ccache), used when it is installed and FEDCORE_CCACHE is on.
#
# Why: CI builds every push from a fresh clone into four trees (dev, two CPU levels, the
# sanitizer trees; docs/ci.md). Without a cache each push recompiles about 400 objects per
# tree; with one, only what the push changed.
#
# How the cache is shared across clones: CCACHE_BASEDIR is the source root, so absolute
# paths under it are rewritten relative to the build directory, and CCACHE_NOHASHDIR drops
# the working directory from the hash (it only matters for debug info, which then names
# the first clone's paths: harmless for CI, and a developer's own tree always hits itself).
# CCACHE_MAXSIZE: seven trees (CI's five, release, the previous version) of about 0.5 GB of
# objects each with line-table debug information, with room to spare; kept well below
# the free disk of a CI machine (a 20 GB cache once helped fill one).
#
# Why the CPU goes into the hash: ccache hashes the command line, and "-march=native"
# means a different instruction set on another CPU. For native builds the flags GCC
# resolves it to are written to a file that ccache hashes as an extra input.
option(FEDCORE_CCACHE "Compile through ccache when it is installed" ON)
find_program(FEDCORE_CCACHE_PROGRAM ccache)
if(FEDCORE_CCACHE AND FEDCORE_CCACHE_PROGRAM)
  set(cpu_file "${CMAKE_BINARY_DIR}/ccache-cpu-flags.txt")
  if(FEDCORE_ARCH STREQUAL "native")
    execute_process(
      COMMAND ${CMAKE_CXX_COMPILER} -march=native -Q --help=target
      OUTPUT_VARIABLE resolved_target_flags ERROR_QUIET)
    file(WRITE "${cpu_file}" "${resolved_target_flags}")
  else()
    file(WRITE "${cpu_file}" "-march=${FEDCORE_ARCH}\n")
  endif()
  set(launcher ${CMAKE_COMMAND} -E env
    "CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=8G
    "CCACHE_EXTRAFILES=${cpu_file}" ${FEDCORE_CCACHE_PROGRAM})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${launcher})
  message(STATUS "Compiling through ccache (${FEDCORE_CCACHE_PROGRAM})")
endif()
