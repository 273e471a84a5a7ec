#!/usr/bin/env bash
# Compiles Fedcore's code at other CPU levels with warnings as errors, so a warning that
# only one instruction set brings (AVX-512, or the x86-64-v2 baseline) is caught before it
# reaches a user with that CPU. Builds nothing it does not need: the translation units whose
# code changes with -march are the ones that include Eigen (through shared/util/eigen.hpp), and a
# reference build's dependency log lists them.
#
#   scripts/compile_check.sh [--reference DIR | --all] ARCH...
#     ARCH         x86-64-v2 or x86-64-v4 (each has a CMake preset check-ARCH)
#     --reference  a finished build whose .ninja_deps says which objects include Eigen
#                  (default build/dev); without one, or with --all, everything is compiled
#
# Object files only, nothing is linked or run. Exits non-zero on the first level that fails.
set -euo pipefail
cd "$(dirname "$0")/.."

reference=build/dev
compile_all=0
levels=()
while (($#)); do
  case "$1" in
    --reference) reference="$2"; shift 2 ;;
    --all) compile_all=1; shift ;;
    x86-64-v2|x86-64-v4) levels+=("$1"); shift ;;
    *) echo "compile_check: unknown argument '$1' (levels: x86-64-v2 x86-64-v4)" >&2; exit 2 ;;
  esac
done
((${#levels[@]})) || { echo "compile_check: name at least one level" >&2; exit 2; }

objects=()
if ((compile_all == 0)) && [[ -f "$reference/.ninja_deps" ]]; then
  # `ninja -t deps` prints "object: #deps N, ..." then one indented line per dependency.
  mapfile -t objects < <(ninja -C "$reference" -t deps |
    awk '/^[^ \t].*: #deps/ { object = $1; sub(/:$/, "", object) }
         /shared\/util\/eigen\.hpp$/ { print object }' | sort -u)
  if ((${#objects[@]} == 0)); then
    echo "compile_check: $reference lists no object that includes util/eigen.hpp" >&2
    exit 1
  fi
fi

for level in "${levels[@]}"; do
  start=$SECONDS
  cmake --preset "check-$level" >/dev/null
  if ((${#objects[@]})); then
    echo "compile_check: $level: ${#objects[@]} translation units that include Eigen"
    ninja -C "build/check-$level" "${objects[@]}"
  else
    echo "compile_check: $level: every target"
    cmake --build --preset "check-$level"
  fi
  echo "compile_check: $level passed in $((SECONDS - start)) s"
done
