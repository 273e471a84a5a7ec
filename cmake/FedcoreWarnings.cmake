# fedcore_strict(target): our own code builds warning-free at every CPU level (FEDCORE_ARCH).
# Third-party compiled units (the Asio/Beast static libraries) do not get these flags.
#
# Warnings become errors only with FEDCORE_WERROR=ON, which the ci and dev presets set: a
# user's build must never fail because a new compiler or CPU brings a new warning, while
# CI still refuses code that warns (.ci/run compiles at x86-64-v2 and x86-64-v4 too).
#
# GCC 12 reports a false -Wrestrict on ordinary string concatenation at -O3
# ("[" + std::to_string(n) + "]"; GCC bug 105651, fixed in GCC 13), so that one warning
# is off for GCC < 13 only. The AVX-512 false positive of GCC 12 (bug 105593) is silenced
# where it occurs, in util/eigen.hpp, not here.
function(fedcore_strict target)
  target_compile_options(${target} PRIVATE -Wall -Wextra
    $<$<BOOL:${FEDCORE_WERROR}>:-Werror -Wno-error=deprecated-declarations>
    $<$<AND:$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>)
endfunction()
