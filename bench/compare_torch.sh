#!/usr/bin/env bash
# Runs bench_train_step and the same steps in PyTorch, side by side, in one run.
#   [REPEATS=N] bench/compare_torch.sh [BUILD_DIR] [BENCHMARK_FILTER]
# REPEATS=N (default 1) alternates N Fedcore runs with N PyTorch runs and prints, per
# configuration, the medians, their ratio and every run's ratio: on a shared VM one
# library's speed moves by 30-60% from one minute to the next, so a single pair can mislead.
#   AVX2_ONLY=1 bench/compare_torch.sh build/v3   # both sides as on a CPU without AVX-512
# AVX2_ONLY emulates an AVX2 machine on one that has AVX-512: Fedcore's layers stay off the
# AVX-512 kernels (--gemm=standard --conv=gemm), OpenBLAS runs its Haswell kernels on both
# sides, and PyTorch's oneDNN is capped at AVX2 (ONEDNN_MAX_CPU_ISA). Give it a build compiled for
# x86-64-v3 (cmake -DFEDCORE_ARCH=x86-64-v3); the few kernels dispatched by cpuid
# (shared/model/update_kernels.hpp) still take their AVX-512 clone here.
# PyTorch is pointed at Debian's OpenBLAS (OpenMP build): Debian's torch otherwise calls
# whichever libblas.so.3 the loader finds first, and the reference BLAS is ~15x slower.
set -euo pipefail
build=${1:-build/release}
filter=${2:-.}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/fedcore-1.json
repeats=${REPEATS:-1}
fedcore_args=()
if [[ "${AVX2_ONLY:-0}" == 1 ]]; then
  export OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2
  fedcore_args+=(--gemm=standard --conv=gemm)
fi
"$build/bench/bench_train_step" "${fedcore_args[@]}" --benchmark_filter="$filter" --benchmark_out="$out" --benchmark_out_format=json
openblas=/usr/lib/x86_64-linux-gnu/openblas-openmp
if [[ ! -e $openblas/libblas.so.3 ]]; then
  echo "compare_torch: $openblas missing (scripts/setup.sh --bench installs libopenblas0-openmp); PyTorch would use the reference BLAS, skipping" >&2
  exit 0
fi
if [[ ! -x /usr/bin/python3 ]]; then
  echo "compare_torch: /usr/bin/python3 missing; skipping the PyTorch side" >&2
  exit 0
fi
# The same OpenBLAS kernels for PyTorch's products as Fedcore's ran on (its BLAS core is in
# the benchmark's context; shared/util/blas_kernels.hpp), unless the caller chose one.
core=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["context"].get("blas_core",""))' "$out")
if [[ -z "${OPENBLAS_CORETYPE:-}" && -n "$core" ]]; then
  export OPENBLAS_CORETYPE=$core
fi
gemm=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["context"].get("gemm_kernel",""))' "$out")
wide=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["context"].get("wide_conv_kernel",""))' "$out")
echo "compare_torch: OpenBLAS core: Fedcore $core, PyTorch ${OPENBLAS_CORETYPE:-its own choice}; Fedcore's layer products: $gemm kernel (shared/model/gemm.hpp), wide convolutions: ${wide:-off} (shared/model/conv_wide.hpp); PyTorch oneDNN ISA cap: ${ONEDNN_MAX_CPU_ISA:-none}"
torch_python() {
  LD_LIBRARY_PATH=$openblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} /usr/bin/python3 "$here/compare_torch.py" "$@"
}
if ((repeats <= 1)); then
  torch_python "$out"
  exit 0
fi
runs=("$out")
torch_python --torch-json "$work/torch-1.json" "$out"
runs+=("$work/torch-1.json")
for ((r = 2; r <= repeats; r++)); do
  echo "compare_torch: run $r of $repeats"
  "$build/bench/bench_train_step" "${fedcore_args[@]}" --benchmark_filter="$filter" \
    --benchmark_out="$work/fedcore-$r.json" --benchmark_out_format=json >/dev/null
  torch_python --torch-json "$work/torch-$r.json" "$work/fedcore-$r.json"
  runs+=("$work/fedcore-$r.json" "$work/torch-$r.json")
done
torch_python --summary "${runs[@]}"
