#!/bin/sh
# Usage: isa_objects_test.sh OBJECT...
# Fails when an object compiled for a wider instruction set than the build's defines a symbol
# other code could bind to: anything global or weak that is neither in the renamed Eigen
# (FedcoreEigenAvx512) nor the file's one entry point (fedcore::model::gemm::detail::multiply_avx512).
# DW.ref.__gxx_personality_v0 is data (a pointer the unwinder reads), not code.
set -eu
status=0
for object in "$@"; do
  if [ ! -s "$object" ]; then
    echo "isa_objects_test: no object file '$object'" >&2
    exit 1
  fi
  entry=$(nm --defined-only --extern-only -C "$object" | grep -c 'fedcore::model::gemm::detail::multiply_avx512' || true)
  if [ "$entry" -ne 1 ]; then
    echo "isa_objects_test: $object does not define multiply_avx512 exactly once" >&2
    status=1
  fi
  stray=$(nm --defined-only --extern-only -C "$object" |
    grep -v 'FedcoreEigenAvx512' |
    grep -v 'fedcore::model::gemm::detail::multiply_avx512' |
    grep -v ' DW\.ref\.__gxx_personality_v0$' || true)
  if [ -n "$stray" ]; then
    echo "isa_objects_test: $object defines symbols outside its renamed Eigen:" >&2
    echo "$stray" >&2
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "isa_objects_test: $# object(s) define only their renamed Eigen and entry point"
exit "$status"
