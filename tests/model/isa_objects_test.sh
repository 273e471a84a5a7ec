#!/bin/sh
# Usage: isa_objects_test.sh OBJECT...
# Fails when an object compiled for a wider instruction set than the build's defines a symbol
# other code could bind to: anything global or weak that is neither in the renamed Eigen
# (FedcoreEigenAvx512) nor one of the files' entry points (fedcore::model::gemm::detail::
# multiply_avx512, the functions of fedcore::model::kernels::avx512). Each object must
# define at least one entry point.
# DW.ref.__gxx_personality_v0 is data (a pointer the unwinder reads), not code.
set -eu
entries='fedcore::model::gemm::detail::multiply_avx512\|fedcore::model::kernels::avx512::'
status=0
for object in "$@"; do
  if [ ! -s "$object" ]; then
    echo "isa_objects_test: no object file '$object'" >&2
    exit 1
  fi
  entry=$(nm --defined-only --extern-only -C "$object" | grep -c "$entries" || true)
  if [ "$entry" -lt 1 ]; then
    echo "isa_objects_test: $object defines no entry point" >&2
    status=1
  fi
  stray=$(nm --defined-only --extern-only -C "$object" |
    grep -v 'FedcoreEigenAvx512' |
    grep -v "$entries" |
    grep -v ' DW\.ref\.__gxx_personality_v0$' || true)
  if [ -n "$stray" ]; then
    echo "isa_objects_test: $object defines symbols outside its renamed Eigen and entry points:" >&2
    echo "$stray" >&2
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "isa_objects_test: $# object(s) define only their renamed Eigen and entry points"
exit "$status"
