# fedcore_strict(target): our own code builds warning-free. Third-party compiled units
# (the Asio/Beast static libraries) do not get these flags.
function(fedcore_strict target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror -Wno-error=deprecated-declarations)
endfunction()
