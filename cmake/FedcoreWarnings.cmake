# fedcore_strict(target): our own code builds warning-free. Third-party compiled units
# (the Asio/Beast static libraries) do not get these flags.
#
# GCC 12 reports a false -Wrestrict on ordinary string concatenation at -O3
# ("[" + std::to_string(n) + "]"; GCC bug 105651, fixed in GCC 13), so that one warning
# is off for GCC < 13 only.
function(fedcore_strict target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror -Wno-error=deprecated-declarations
    $<$<AND:$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>)
endfunction()
