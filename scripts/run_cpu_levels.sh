#!/usr/bin/env bash
# The longer CI tier (not run per push): the portable build (x86-64-v2, run-time dispatch
# of the hot loops) run on CPUs without AVX-512, emulated by QEMU user mode:
#   Nehalem  an x86-64-v2 CPU (SSE4.2, no AVX): the dispatched kernels take the baseline
#   Haswell  an x86-64-v3 CPU (AVX2, FMA):      the dispatched kernels take x86-64-v3
# Under each it runs the model suite (every dispatched kernel against its formula, layer
# gradients, the CPU level the dispatch chose), the training suite (real data sets to
# their accuracy) and the demo's simulated federation (make demo's options, 2 rounds, no
# dashboard), then checks the demo's accuracy. QEMU's emulation is 10-40x slower than the
# machine: about 25 minutes on 2 cores, on top of the portable build.
#
#   scripts/run_cpu_levels.sh [CPU...]     default: Nehalem Haswell
set -euo pipefail
cd "$(dirname "$0")/.."
cpus=("$@")
((${#cpus[@]})) || cpus=(Nehalem Haswell)

scripts/setup.sh --cpu-levels
cmake --preset portable >/dev/null
cmake --build --preset portable -j "$(nproc)" --target model_test training_test fedcore-sim
build=build/portable

# What each emulated CPU must get from our run-time dispatch, and the OpenBLAS kernel set
# to use there. Under QEMU's Nehalem model (which reports GenuineIntel family 6 model 0x1A
# without AVX to a cpuid probe), Debian's OpenBLAS 0.3.21 selects its Haswell kernels
# (OPENBLAS_VERBOSE=2 prints "Core: Haswell") and dies on the first vmovss; why, and
# whether a real Nehalem does the same, is not established. So the script names
# OpenBLAS's kernels; our own dispatch (GCC target_clones) is what this checks.
declare -A dispatch=([Nehalem]=baseline [Haswell]=x86-64-v3)
declare -A openblas=([Nehalem]=NEHALEM [Haswell]=HASWELL)

for cpu in "${cpus[@]}"; do
  echo "== $cpu"
  run=(env FEDCORE_EXPECT_DISPATCH="${dispatch[$cpu]}" OPENBLAS_CORETYPE="${openblas[$cpu]}"
       qemu-x86_64 -cpu "$cpu")
  "${run[@]}" "$build/tests/model/model_test" --gtest_brief=1
  "${run[@]}" "$build/tests/model/training_test" --gtest_brief=1
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  "${run[@]}" "$build/sim/fedcore-sim" --dataset fashion-mnist --partition dirichlet:0.5 \
    --clients 8 --model mlp --rounds 2 --local-epochs 1 --batch 32 --lr 0.05 --momentum 0.9 \
    --seed 1 --out "$out" --quiet
  python3 - "$out/summary.json" "$cpu" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
accuracy = summary["federated"]["final_accuracy"]
print(f"{sys.argv[2]}: demo federation, 2 rounds: {accuracy:.4f}")
sys.exit(0 if accuracy > 0.70 else 1)
PY
  rm -rf "$out"
  trap - EXIT
done
